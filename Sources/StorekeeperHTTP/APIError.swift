import Foundation
import HTTPTypes
package import Hummingbird

/// An error that answers itself as JSON, `{"error": {"code": "…", "message": "…"}}`, with a stable code: what the
/// handlers of Storekeeper's HTTP APIs (the server's, and the simulator's control API) throw instead of building
/// error responses by hand. The message names what was wrong; a handler puts unverified input in it only escaped
/// and cut (`UntrustedText`).
package struct APIError: HTTPResponseError, Sendable, CustomStringConvertible {
    /// A stable, machine-readable reason (`invalid-customer-id`, `unknown-customer`, …).
    /// Each route's codes are constants (the server's are in `StorekeeperServer`'s `APIErrorCodes.swift`), so that one code is spelled once.
    package struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package var description: String { rawValue }
    }

    package var status: HTTPResponse.Status
    package var code: Code
    package var message: String
    /// Headers the answer carries besides `Content-Type` (e.g. `Allow` with 405).
    package var headers: HTTPFields

    package init(_ status: HTTPResponse.Status, _ code: Code, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    package var description: String { "\(status.code) \(code): \(message)" }

    /// The JSON body this error answers with.
    package var body: ByteBuffer {
        struct Body: Encodable {
            struct Inner: Encodable {
                var code: String
                var message: String
            }
            var error: Inner
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(Body(error: .init(code: code.rawValue, message: message)))) ?? Data("{}".utf8)
        return ByteBuffer(bytes: data)
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        // An error may quote what the request sent (escaped for JSON, not for HTML): no browser sniffs it into a page.
        fields[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        return Response(status: status, headers: fields, body: .init(byteBuffer: body))
    }
}
