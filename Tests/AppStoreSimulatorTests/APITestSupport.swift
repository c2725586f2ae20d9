import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

/// An in-memory simulator behind its HTTP router, with an API key to sign tokens.
struct APITestbed {
    let simulator: Simulator
    let harness: SimulatorFixture

    init(environment: AppStoreEnvironment = .sandbox, setUp: (inout LifecycleEngine) throws -> Void = { _ in }) throws {
        var harness = SimulatorFixture(environment: environment)
        try setUp(&harness.engine)
        self.harness = harness
        simulator = TestAppStore.simulator(harness.engine)
    }

    static func token(bundleId: String = TestAppStore.bundleID, lifetime: TimeInterval = 300, issuedAt: Date = Date()) throws -> String {
        try TestAppStore.apiToken(bundleID: bundleId, lifetime: lifetime, issuedAt: issuedAt)
    }

    /// Runs `body` with a client for the router.
    func withClient(_ body: @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let app = Application(router: SimulatorApplication.buildRouter(simulator: simulator))
        try await app.test(.router, body)
    }
}

struct APIResult: Sendable {
    var status: Int
    var json: [String: any Sendable]
    var text: String
    var retryAfter: String?

    var errorCode: Int? { (json["errorCode"] as? NSNumber)?.intValue ?? json["errorCode"] as? Int }
}

extension TestClientProtocol {
    func call(
        _ method: HTTPRequest.Method,
        _ path: String,
        body: String? = nil,
        token: String? = nil
    ) async throws -> APIResult {
        var headers: HTTPFields = [:]
        let bearer = try token ?? APITestbed.token()
        if !bearer.isEmpty { headers[.authorization] = "Bearer " + bearer }
        headers[.contentType] = "application/json"
        return try await execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) }) { response in
            let text = String(buffer: response.body)
            let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: any Sendable] ?? [:]
            return APIResult(
                status: Int(response.status.code), json: object, text: text,
                retryAfter: response.headers[.retryAfter]
            )
        }
    }
}
