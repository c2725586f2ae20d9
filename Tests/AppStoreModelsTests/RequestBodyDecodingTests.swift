import Foundation
import Testing

@testable import AppStoreModels

/// The webhook body's one-pass reader (``NotificationRequestBody/init(json:)``) gives what `JSONDecoder` gives, on
/// every form, and reads only the plain one itself.
@Suite("Notification request body decoding")
struct RequestBodyDecodingTests {
    static let jws = "eyJhbGciOiJFUzI1NiJ9.eyJub3RpZmljYXRpb25UeXBlIjoiVEVTVCJ9.c2lnbmF0dXJlLWJ5dGVz-_0"

    static let bodies: [String] = [
        #"{"signedPayload":"\#(jws)"}"#,
        " \r\n\t{ \"signedPayload\" :\n\"\(jws)\" } \n",
        #"{"signedPayload":""}"#,
        #"{"signedPayload":"a\/b"}"#,
        #"{"signedPayload":"a\u002eb"}"#,
        #"{"signedPayload":"\#(jws)","extra":1}"#,
        #"{"extra":[1,2],"signedPayload":"\#(jws)"}"#,
        #"{"signedPayload":"\#(jws)","signedPayload":"x"}"#,
        #"{"signedPayload":"tab\there"}"#,
        #"{"signedPayload":"\#(jws)"}x"#,
        #"{"signedPayload":"\#(jws)"} {}"#,
        #"{"signedPayload":"\#(jws)""#,
        #"{"signedPayload":"\#(jws)}"#,
        #"{"signedPayload":1}"#,
        #"{"signedPayload":null}"#,
        #"{"signedpayload":"\#(jws)"}"#,
        #"{"signedPayload" "\#(jws)"}"#,
        #"["signedPayload","\#(jws)"]"#,
        "{\"signedPayload\":\"é\(jws)\"}",
        "{\"signedPayload\":\"\u{1B}[31m\"}",
        "",
        "{}",
        "{",
    ]

    @Test("every body decodes to JSONDecoder's value, or fails where it fails", arguments: bodies)
    func sameAsJSONDecoder(body: String) {
        let bytes = Array(body.utf8)
        let expected = try? JSONDecoder().decode(NotificationRequestBody.self, from: Data(bytes))
        let decoded = try? NotificationRequestBody(json: bytes)
        #expect(decoded == expected)
    }

    @Test(
        "the plain shape is read in one pass (other scalar members skipped); escapes, nested values, repeated members and trailing bytes are left to JSONDecoder"
    )
    func plainForm() {
        #expect(NotificationRequestBody.plainSignedPayload(Array(Self.bodies[0].utf8)) == Self.jws)
        #expect(NotificationRequestBody.plainSignedPayload(Array(Self.bodies[1].utf8)) == Self.jws)
        #expect(NotificationRequestBody.plainSignedPayload(Array(Self.bodies[2].utf8)) == "")
        #expect(NotificationRequestBody.plainSignedPayload(Array(Self.bodies[5].utf8)) == Self.jws)
        #expect(NotificationRequestBody.plainSignedPayload(Array(Self.bodies[18].utf8)) == "é\(Self.jws)")
        for (index, body) in Self.bodies.enumerated() where index >= 3 && ![5, 18].contains(index) {
            #expect(NotificationRequestBody.plainSignedPayload(Array(body.utf8)) == nil, "\(body)")
        }
        // What the fallback made of the escapes.
        #expect((try? NotificationRequestBody(json: Array(Self.bodies[3].utf8)))?.signedPayload == "a/b")
        #expect((try? NotificationRequestBody(json: Array(Self.bodies[4].utf8)))?.signedPayload == "a.b")
    }
}
