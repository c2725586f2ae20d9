import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreSigning

@Suite("Base64 and base64url coding")
struct Base64URLTests {
    @Test("base64url round-trips every length from 0 to 200 bytes")
    func roundTrip() throws {
        var generator = SystemRandomNumberGenerator()
        for length in 0...200 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let encoded = Base64URL.encode(bytes)
            #expect(!encoded.contains("=") && !encoded.contains("+") && !encoded.contains("/"))
            #expect(try Base64URL.decode(Substring(encoded).utf8) == bytes)
            // Standard base64 agrees with Foundation's.
            #expect(try Base64URL.decodeStandard(Data(bytes).base64EncodedString()) == bytes)
        }
    }

    @Test(
        "non-canonical or foreign input is refused",
        arguments: [
            "QQ=", "QQ==", "QR", "Q", "QUJD+A", "QUJD/A", "QU JD", "QUJD\n",
        ])
    func strictURL(input: String) {
        #expect(throws: Base64URL.DecodingFailure.self) { try Base64URL.decode(Substring(input).utf8) }
    }

    @Test("standard base64 must be canonically padded", arguments: ["QQ", "QQ=", "QR==", "Q===", "QUJD-A==", "QU=D"])
    func strictStandard(input: String) {
        #expect(throws: Base64URL.DecodingFailure.self) { try Base64URL.decodeStandard(input) }
    }
}
