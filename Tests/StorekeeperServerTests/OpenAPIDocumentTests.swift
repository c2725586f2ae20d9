import AppStoreModels
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import StorekeeperServer
import StorekeeperTesting
import Testing

/// `/openapi.json` says what the server answers: valid OpenAPI 3.1 (checked by openapi-spec-validator from PyPI),
/// every route the server answers documented, every documented operation answered, with a documented status.
@Suite("Storekeeper server: the OpenAPI document")
struct OpenAPIDocumentTests {
    typealias T = ServerTestbed

    static let validatorAvailable = ExternalTool.succeeds(["python3", "-c", "import openapi_spec_validator"])

    /// The served document, parsed.
    static func document(_ client: some TestClientProtocol) async throws -> (bytes: Data, json: [String: Any]) {
        try await client.execute(uri: "/openapi.json", method: .get) { response in
            #expect(response.status == .ok && response.headers[.contentType] == "application/json")
            let bytes = Data(String(buffer: response.body).utf8)
            return (bytes, try #require(try JSONSerialization.jsonObject(with: bytes) as? [String: Any]))
        }
    }

    @Test(
        "the document is served without a key and is valid OpenAPI 3.1 for openapi-spec-validator",
        .enabled(if: validatorAvailable, "python3 with openapi-spec-validator is not installed (pip install openapi-spec-validator; .ci/run does)"))
    func valid() async throws {
        let testbed = try T(catalog: T.twoApps)
        let file = TestFiles.directory.appendingPathComponent("openapi-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try await testbed.withClient { client in try await Self.document(client).bytes.write(to: file) }
        let (said, passed) = try await ExternalTool.run([
            "python3", "-c",
            "import sys; from openapi_spec_validator import validate; from openapi_spec_validator.readers import read_from_filename; "
                + "validate(read_from_filename(sys.argv[1])[0]); print('valid')", file.path,
        ])
        #expect(passed && said.contains("valid"), "\(said)")
    }

    /// Every route the server answers, as a request (the router's paths, one concrete path each).
    static let routes: [(HTTPRequest.Method, String)] = [
        (.post, "/appstore/notifications"), (.get, "/health"), (.get, "/metrics"), (.get, "/openapi.json"),
        (.get, "/v1/customers/alice"), (.delete, "/v1/customers/alice"), (.post, "/v1/customers/alice/transactions"),
        (.post, "/v1/customers/alice/app-account-token"), (.post, "/v1/customers/alice/receipts"),
        (.post, "/v1/customers/alice/offers/promo.half/signature"), (.post, "/v1/admin/imports"), (.get, "/v1/admin/imports"),
        (.get, "/v1/admin/imports/imp_abc"), (.delete, "/v1/admin/imports/imp_abc"),
        (.post, "/v1/customers/alice/introductory-offer-eligibility"),
        (.get, "/v1/events"),
        (.get, "/v1/events/evt_01jzz00000000000000000000a"),
        (.get, "/v1/admin/webhooks"), (.post, "/v1/admin/webhooks/backend/resume"), (.post, "/v1/admin/webhooks/backend/replay"),
        (.post, "/v1/admin/webhooks/backend/redeliver"), (.get, "/v1/admin/events/evt_01jzz00000000000000000000a"),
        (.post, "/v1/admin/customers/alice/reconcile"), (.get, "/v1/support/search"), (.get, "/v1/support/customers/alice"),
        (.get, "/v1/support/customers/alice/refunds"), (.post, "/v1/support/customers/alice/subscriptions/2000000000000001/extend"),
        (.post, "/v1/support/mass-extensions"), (.get, "/v1/support/mass-extensions"), (.get, "/v1/support/mass-extensions/pro.monthly/abc"),
        (.put, "/v1/customers/alice/consumption-consent"), (.get, "/v1/support/consumption-requests"),
        (.get, "/v1/support/consumption-requests/abc"), (.post, "/v1/support/consumption-requests/abc/answer"),
        (.get, "/v1/support/overview"), (.get, "/v1/support/customers/alice/promotional-entitlements"),
        (.post, "/v1/support/customers/alice/promotional-entitlements"),
        (.post, "/v1/support/customers/alice/promotional-entitlements/abc/revoke"),
    ]

    /// The documented template a concrete path matches (`{…}` matching one segment).
    static func template(of path: String, in templates: [String]) -> String? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return templates.first { template in
            let pattern = template.split(separator: "/", omittingEmptySubsequences: false)
            return pattern.count == parts.count && zip(pattern, parts).allSatisfy { $0.hasPrefix("{") || $0 == $1 }
        }
    }

    @Test("every route the server answers is documented, and every documented operation is answered with a status the document lists")
    func matchesTheRoutes() async throws {
        let testbed = try T(catalog: T.twoApps)
        try await testbed.withClient { client in
            let document = try await Self.document(client).json
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            var documented = Set<String>()
            for (path, operations) in paths {
                for method in operations.keys { documented.insert("\(method.uppercased()) \(path)") }
            }
            var answered = Set<String>()
            for (method, path) in Self.routes {
                let template = try #require(Self.template(of: path, in: Array(paths.keys)), "\(path) is not documented")
                let operation = try #require(
                    paths[template]?[method.rawValue.lowercased()] as? [String: Any], "\(method) \(template) is not documented")
                answered.insert("\(method.rawValue) \(template)")
                let responses = Set((operation["responses"] as? [String: Any] ?? [:]).keys)
                // With the admin key (support routes: the support key), and no body: the route answers, not the
                // router's 404/405, with a status the document lists.
                let key = path.hasPrefix("/v1/support") ? T.supportKey : T.adminKey
                let answer = try await client.send(method, path + (path == "/v1/support/search" ? "?q=alice" : ""), key: key)
                #expect(answer.errorCode != "no-such-route" && answer.errorCode != "method-not-allowed", "\(method) \(path): \(answer.json)")
                #expect(responses.contains(String(answer.status)), "\(method) \(path) answered \(answer.status), documented: \(responses.sorted())")
            }
            #expect(documented == answered, "documented but not in the router: \(documented.subtracting(answered).sorted())")
        }
    }
}
