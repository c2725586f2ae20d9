import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import StorekeeperCore
import StorekeeperDemo
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

/// A server over a fresh SQLite file, trusting a simulator engine's CA, with two apps and their keys.
struct ServerTestbed {
    static let start = Date(timeIntervalSince1970: 1_780_000_000)
    static let appKey = "app-key-\(UUID())"
    static let otherAppKey = "other-key-\(UUID())"
    static let adminKey = "admin-key-\(UUID())"
    static let supportKey = "support-key-\(UUID())"
    static let otherSupportKey = "other-support-key-\(UUID())"

    var engine: LifecycleEngine
    let rootFile: String
    let store: SQLiteLedgerStore
    /// Signs like the simulator (same CA).
    let signer: JWSSigner

    /// The sample catalog, and a second app (`com.example.other`, as configured) selling `other.unlock`.
    static let twoApps: Catalog = {
        var catalog = Catalog.sample
        catalog.apps.append(.init(bundleId: "com.example.other", appAppleId: 1, name: "Other"))
        catalog.products.append(.init(productId: "other.unlock", bundleId: "com.example.other", type: .nonConsumable, prices: ["USA": 990]))
        return catalog
    }()

    /// Where the testbed keeps its files.
    let directory: URL

    init(failure: (@Sendable (String) throws -> Void)? = nil, catalog: Catalog = .sample) throws {
        let directory = TestFiles.directory.appendingPathComponent("server-\(UUID())")
        self.directory = directory
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), catalog: catalog, now: Self.start)
        let authority = try simulatorDirectory.loadAuthority()
        signer = try authority.makeSigner()
        engine = try LifecycleEngine(
            catalog: try simulatorDirectory.loadCatalog(), state: try simulatorDirectory.loadState(), signer: try authority.makeSigner()
        )
        rootFile = simulatorDirectory.rootCertificateFile.path
        store = try SQLiteLedgerStore(path: directory.appendingPathComponent("db.sqlite").path, unsafeFaultInjection: failure)
    }

    var configuration: ServerConfiguration {
        ServerConfiguration(
            apps: [
                .init(bundleId: "com.example.storekeeper", appAppleId: 6_450_000_001, environments: [.sandbox], trustedRoots: [rootFile]),
                .init(bundleId: "com.example.other", appAppleId: 1, environments: [.sandbox], trustedRoots: [rootFile]),
            ],
            entitlements: EntitlementConfiguration(productEntitlements: ["pro.monthly": ["pro"]], subscriptionLevels: ["pro.monthly": 2]),
            apiKeys: [
                .init(name: "app", sha256: ServerConfiguration.hash(apiKey: Self.appKey), scope: .app, bundleId: "com.example.storekeeper"),
                .init(name: "other", sha256: ServerConfiguration.hash(apiKey: Self.otherAppKey), scope: .app, bundleId: "com.example.other"),
                .init(name: "admin", sha256: ServerConfiguration.hash(apiKey: Self.adminKey), scope: .admin, bundleId: nil),
                .init(name: "support", sha256: ServerConfiguration.hash(apiKey: Self.supportKey), scope: .support, bundleId: nil),
                .init(
                    name: "other-support", sha256: ServerConfiguration.hash(apiKey: Self.otherSupportKey), scope: .support,
                    bundleId: "com.example.other"),
            ]
        )
    }

    func withClient(
        exporter: MetricsExporter = MetricsExporter(), configuration: ServerConfiguration? = nil, now: (@Sendable () -> Date)? = nil,
        _ body: @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let start = engine.state.now
        let configuration = configuration ?? self.configuration
        let app = StorekeeperApplication.buildApplication(
            store: store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0,
            logger: Logger(label: "test"), exporter: exporter, now: now ?? { start }
        )
        try await app.test(.router, body)
    }
}

struct Answer: Sendable {
    var status: Int
    var json: [String: any Sendable]
    var allow: String? = nil
    var errorCode: String? { (json["error"] as? [String: Any])?["code"] as? String }
    var errorMessage: String { (json["error"] as? [String: Any])?["message"] as? String ?? "" }
}

extension TestClientProtocol {
    func send(_ method: HTTPRequest.Method, _ path: String, body: String? = nil, key: String? = nil) async throws -> Answer {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let key { headers[.authorization] = "Bearer " + key }
        return try await execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) }) { response in
            let object = (try? JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8))) as? [String: any Sendable] ?? [:]
            return Answer(status: Int(response.status.code), json: object, allow: response.headers[.allow])
        }
    }
}

@Suite("Storekeeper server: webhook")
struct WebhookTests {
    typealias T = ServerTestbed

    static func body(_ jws: String) -> String { #"{"signedPayload":"\#(jws)"}"# }

    @Test("a verified notification is applied and answered 200 after commit; its duplicate is acknowledged")
    func applyAndDuplicate() async throws {
        var testbed = try T()
        try testbed.engine.createCustomer(id: "alice")
        _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let jws = testbed.engine.state.notifications[0].signedPayload
        try await testbed.withClient { client in
            let first = try await client.send(.post, "/appstore/notifications", body: Self.body(jws))
            #expect(first.status == 200 && first.json["outcome"] as? String == "applied")
            let again = try await client.send(.post, "/appstore/notifications", body: Self.body(jws))
            #expect(again.status == 200 && again.json["outcome"] as? String == "duplicate")
            #expect(try await client.send(.get, "/health").status == 200)
        }
        #expect(try await testbed.store.notificationCounts()["applied"] == 1)
    }

    @Test(
        "bad input is refused with a JSON error and changes nothing",
        arguments: [
            ("not json", 400, "malformed-body"),
            (#"{"other":1}"#, 400, "malformed-body"),
            (#"{"signedPayload":""}"#, 400, "malformed-body"),
            (#"{"signedPayload":"a.b"}"#, 400, "malformed-jws"),
        ])
    func badInput(body: String, status: Int, code: String) async throws {
        let testbed = try T()
        try await testbed.withClient { client in
            let answer = try await client.send(.post, "/appstore/notifications", body: body)
            #expect(answer.status == status && answer.errorCode == code, "\(answer.json)")
        }
        #expect(try await testbed.store.notificationCounts()["applied"] == nil)
    }

    @Test("forged, tampered, misdirected, oversized and unknown notifications")
    func refusals() async throws {
        var testbed = try T()
        try testbed.engine.createCustomer(id: "alice")
        _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "coins.100"))
        let genuine = testbed.engine.state.notifications[0].signedPayload
        let impostor = try TestCertificateAuthority.generate().makeSigner()
        let forged = try impostor.sign(
            NotificationPayload(
                notificationType: .oneTimeCharge, notificationUUID: UUID().uuidString,
                data: NotificationData(bundleId: "com.example.storekeeper", environment: .sandbox)
            ))
        var parts = genuine.split(separator: ".").map(String.init)
        parts[1] = String(parts[1].reversed())
        let tampered = parts.joined(separator: ".")
        let production = try impostor.sign(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString,
                data: NotificationData(bundleId: "com.example.storekeeper", environment: .production)
            ))
        let unknownApp = try impostor.sign(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString, data: NotificationData(bundleId: "com.unknown", environment: .sandbox)
            ))
        // An unknown type from the simulator's own CA: verified, recorded, acknowledged.
        let unknownJWS = try testbed.signer.sign(
            NotificationPayload(
                notificationType: "SOMETHING_NEW", notificationUUID: UUID().uuidString, signedDate: T.start,
                data: NotificationData(bundleId: "com.example.storekeeper", environment: .sandbox)
            ))
        try await testbed.withClient { client in
            #expect(try await client.send(.post, "/appstore/notifications", body: Self.body(forged)).errorCode == "untrusted-root")
            let tamperedAnswer = try await client.send(.post, "/appstore/notifications", body: Self.body(tampered))
            #expect(tamperedAnswer.status == 400)
            let misdirected = try await client.send(.post, "/appstore/notifications", body: Self.body(production))
            #expect(misdirected.status == 403 && misdirected.errorCode == "unknown-app-or-environment")
            #expect(try await client.send(.post, "/appstore/notifications", body: Self.body(unknownApp)).status == 403)
            let huge = try await client.send(.post, "/appstore/notifications", body: Self.body(String(repeating: "A", count: 2 << 20)))
            #expect(huge.status == 413)
            let unknown = try await client.send(.post, "/appstore/notifications", body: Self.body(unknownJWS))
            #expect(unknown.status == 200 && unknown.json["outcome"] as? String == "recorded")
        }
        let counts = try await testbed.store.notificationCounts()
        #expect(counts["applied"] == nil && counts["recorded"] == 1)
        #expect(counts["rejected"] == 4)
    }

    @Test(
        "our paths with another method get 405 with Allow; unknown paths 404; both as JSON errors",
        arguments: [
            (HTTPRequest.Method.get, "/appstore/notifications", 405, "POST"), (.put, "/v1/customers/alice", 405, "GET, DELETE"),
            (.get, "/v1/customers/alice/transactions", 405, "POST"), (.post, "/health", 405, "GET, HEAD"), (.delete, "/metrics", 405, "GET, HEAD"),
            (.get, "/nope", 404, nil), (.get, "/v1/customers/", 404, nil), (.post, "/appstore/notifications/extra", 404, nil),
            (.post, "/v1/customers/alice/consumption-consent", 405, "PUT"), (.get, "/dashboard/logout", 405, "POST"),
            (.delete, "/v1/support/consumption-requests/abc", 405, "GET"), (.get, "/v1/support/consumption-requests/abc/answer", 405, "POST"),
            (.delete, "/v1/support/customers/alice/promotional-entitlements", 405, "GET, POST"),
            (.get, "/v1/support/customers/alice/promotional-entitlements/abc/revoke", 405, "POST"),
        ] as [(HTTPRequest.Method, String, Int, String?)])
    func unmatchedRoutes(method: HTTPRequest.Method, path: String, status: Int, allow: String?) async throws {
        let testbed = try T()
        try await testbed.withClient { client in
            let answer = try await client.send(method, path, key: T.appKey)
            #expect(answer.status == status)
            #expect(answer.allow == allow)
            #expect(answer.errorCode == (status == 405 ? "method-not-allowed" : "no-such-route"))
        }
    }

    @Test("an unknown dashboard page is an HTML page for people, not JSON; nothing of the path is echoed")
    func unknownDashboardPage() async throws {
        let testbed = try T()
        try await testbed.withClient { client in
            let answer = try await client.execute(uri: "/dashboard/%3Cscript%3Enope", method: .get) { response in
                (response.status.code, response.headers[.contentType], String(buffer: response.body))
            }
            #expect(answer.0 == 404 && answer.1 == "text/html; charset=utf-8" && answer.2.contains("Not found"), "\(answer)")
            #expect(!answer.2.contains("script") && !answer.2.contains("nope"))
        }
    }

    @Test("a storage failure answers 503 and changes nothing; Apple's retry then applies fully")
    func storageFailure() async throws {
        let fired = Mutex(false)
        var testbed = try T(failure: { point in
            guard point == "before-commit" else { return }
            if fired.withLock({ fired in
                defer { fired = true }
                return !fired
            }) {
                throw FailureInjected()
            }
        })
        try testbed.engine.createCustomer(id: "alice")
        _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let jws = testbed.engine.state.notifications[0].signedPayload
        let store = testbed.store
        try await testbed.withClient { client in
            let failed = try await client.send(.post, "/appstore/notifications", body: Self.body(jws))
            #expect(failed.status == 503 && failed.errorCode == "storage-unavailable")
            #expect(try await store.notificationCounts()["applied"] == nil)
            let retried = try await client.send(.post, "/appstore/notifications", body: Self.body(jws))
            #expect(retried.status == 200 && retried.json["outcome"] as? String == "applied")
        }
    }

    @Test("a write the disk refuses makes /health answer 503 naming it, while reads still work; once writes succeed it says so")
    func diskFullInHealth() async throws {
        let full = Mutex(true)
        var testbed = try T(failure: { point in
            if point == "before-commit", full.withLock({ $0 }) { throw DatabaseError(resultCode: .SQLITE_FULL, message: "database or disk is full") }
        })
        for customer in ["alice", "bob"] {
            try testbed.engine.createCustomer(id: customer)
            _ = try testbed.engine.purchase(.init(customerId: customer, productId: "pro.monthly"))
        }
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        try await testbed.withClient { client in
            #expect(try await client.send(.get, "/health").status == 200)
            let failed = try await client.send(.post, "/appstore/notifications", body: Self.body(notifications[0]))
            #expect(failed.status == 503 && failed.errorCode == "storage-unavailable")
            let health = try await client.send(.get, "/health")
            let reason = health.json["reason"] as? String ?? ""
            #expect(health.status == 503 && health.json["status"] as? String == "unavailable", "\(health)")
            // "writes are failing", or, when a job's small write went through since, "others have succeeded since".
            #expect(reason.contains(" s ago") && reason.contains("db.sqlite is full: nothing was written"), "\(reason)")
            // Reads still answer (the ledger knows no bob yet).
            let read = try await client.send(.get, "/v1/customers/bob", key: T.appKey)
            #expect(read.status == 404 && read.errorCode == "unknown-customer", "\(read)")
            full.withLock { $0 = false }
            let applied = try await client.send(.post, "/appstore/notifications", body: Self.body(notifications[1]))
            #expect(applied.status == 200 && applied.json["outcome"] as? String == "applied")
            let after = try await client.send(.get, "/health")
            #expect(after.status == 503 && (after.json["reason"] as? String ?? "").contains("others have succeeded since"), "\(after)")
        }
        #expect(testbed.store.writeFaults.failure(at: Date().addingTimeInterval(61)) == nil)
    }
}

struct FailureInjected: Error {}
