import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

/// Sends `Authorization: Bearer <key>` on every call of the generated client.
struct BearerKey: ClientMiddleware {
    var key: String

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(key)"
        return try await next(request, body, baseURL)
    }
}

@Suite("OpenAPI: a client generated from /openapi.json (swift-openapi-generator) calls a running server")
struct GeneratedClientTests {
    static let appKey = "generated-app-\(UUID())"
    static let supportKey = "generated-support-\(UUID())"

    @Test("the app, events and support routes answer the generated client's calls with the documented types")
    func calls() async throws {
        let directory = TestFiles.directory.appendingPathComponent("generated-\(UUID())")
        let simulator = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), environment: .sandbox)
        var engine = try LifecycleEngine(
            catalog: try simulator.loadCatalog(), state: try simulator.loadState(), signer: try simulator.loadAuthority().makeSigner())
        try engine.createCustomer(id: "apple-ann")
        let purchase = try engine.purchase(.init(customerId: "apple-ann", productId: "pro.monthly"))
        let configuration = ServerConfiguration(
            apps: [
                .init(
                    bundleId: "com.example.storekeeper", appAppleId: 6_450_000_001, environments: [.sandbox],
                    trustedRoots: [simulator.rootCertificateFile.path])
            ],
            entitlements: EntitlementConfiguration(productEntitlements: ["pro.monthly": ["pro"]]),
            apiKeys: [
                .init(name: "app", sha256: ServerConfiguration.hash(apiKey: Self.appKey), scope: .app, bundleId: "com.example.storekeeper"),
                .init(name: "support", sha256: ServerConfiguration.hash(apiKey: Self.supportKey), scope: .support, bundleId: nil),
            ])
        let store = try SQLiteLedgerStore(path: directory.appendingPathComponent("ledger.sqlite").path)
        let now = engine.state.now
        let ports = AsyncStream<Int>.makeStream()
        let app = StorekeeperApplication.buildApplication(
            store: store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), now: { now }, onServerRunning: { ports.continuation.yield($0) }
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.runService(gracefulShutdownSignals: []) }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            let url = try #require(URL(string: "http://127.0.0.1:\(port)"))
            // Event timestamps are RFC 3339 with milliseconds (as Standard Webhooks' libraries write them).
            let settings = Configuration(dateTranscoder: .iso8601WithFractionalSeconds)
            let client = Client(
                serverURL: url, configuration: settings, transport: AsyncHTTPClientTransport(), middlewares: [BearerKey(key: Self.appKey)])
            let support = Client(
                serverURL: url, configuration: settings, transport: AsyncHTTPClientTransport(), middlewares: [BearerKey(key: Self.supportKey)])

            // The app submits the purchase; the answer is the customer's state, typed.
            let submitted = try await client.submitTransaction(
                path: .init(customerId: "ann"), body: .json(.init(signedTransaction: purchase.signedTransaction)))
            let state = try submitted.ok.body.json
            #expect(state.customerId == "ann" && state.entitlements.map(\.entitlement) == ["pro"])
            let read = try await client.getCustomer(path: .init(customerId: "ann"), query: .init(environment: .sandbox))
            #expect(try read.ok.body.json.subscriptions.first?.productId == "pro.monthly")
            let token = try await client.issueAppAccountToken(path: .init(customerId: "ann")).ok.body.json
            #expect(UUID(uuidString: token.appAccountToken) != nil)
            let consent = try await client.setConsumptionConsent(path: .init(customerId: "ann"), body: .json(.init(consented: true)))
            #expect(try consent.ok.body.json.consented)
            // An error answer is typed too: another customer's unknown ID is a 404 with the error's code.
            let unknown = try await client.getCustomer(path: .init(customerId: "nobody"))
            #expect(try unknown.notFound.body.json.error.code == "unknown-customer")

            // Events and support with the support key.
            let events = try await client.listEvents(query: .init(customer: "ann")).ok.body.json
            #expect(events.events.contains { $0._type == "subscription.started" })
            let found = try await support.supportSearch(query: .init(q: purchase.originalTransactionId)).ok.body.json
            #expect(Set(found.matches.map(\.customerId)) == ["ann"] && found.matches.contains { $0.matchedBy == .originalTransactionId })
            let page = try await support.supportCustomer(path: .init(customerId: "ann"), query: .init(environment: .sandbox)).ok.body.json
            #expect(page.purchases.map(\.transaction.transactionId) == [purchase.transactionId] && page.consumptionRequests.isEmpty)
            let overview = try await support.supportOverview(query: .init(environment: .sandbox)).ok.body.json
            #expect(overview.active == 1 && overview.activeByProduct.additionalProperties == ["pro.monthly": 1])
            // A promotional grant and its revocation, typed; the app's read has it as promotional, not as a purchase.
            let granted = try await support.supportGrant(
                path: .init(customerId: "ann"), query: .init(environment: .sandbox),
                body: .json(.init(entitlement: "pro", days: 7, reason: "goodwill"))
            ).created.body.json
            #expect(granted.grant.active && granted.action.action == "grant-promotional-entitlement")
            let withGrant = try await client.getCustomer(path: .init(customerId: "ann"), query: .init(environment: .sandbox)).ok.body.json
            #expect(withGrant.entitlements.contains { $0.grantId == granted.grant.id && $0.source == "promotional" && $0.productId == nil })
            let revoked = try await support.supportRevokeGrant(
                path: .init(customerId: "ann", grantId: granted.grant.id), query: .init(environment: .sandbox), body: .json(.init(reason: "test"))
            ).ok.body.json
            #expect(!revoked.grant.active && revoked.grant.revokedAt != nil)
            group.cancelAll()
        }
    }
}
