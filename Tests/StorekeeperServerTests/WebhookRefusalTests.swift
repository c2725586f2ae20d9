import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

/// Log lines as a stream handler would print them (`level message key=value…`), kept for inspection.
final class CapturedLog: Sendable {
    private let lines = Mutex<[(Logger.Level, String)]>([])

    var all: [(level: Logger.Level, line: String)] { lines.withLock { $0 } }

    func logger() -> Logger {
        var logger = Logger(label: "test") { _ in Handler(log: self) }
        logger.logLevel = .trace
        return logger
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            let rendered = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            log.lines.withLock { $0.append((event.level, "\(event.level) \(event.message) \(rendered)")) }
        }
    }
}

@Suite("Storekeeper server: refused notifications")
struct WebhookRefusalTests {
    typealias T = ServerTestbed

    static func body(_ jws: String) -> String { #"{"signedPayload":"\#(jws)"}"# }

    static func withLoggedClient(
        _ testbed: T, configuration: ServerConfiguration? = nil, _ body: @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws -> CapturedLog {
        let log = CapturedLog()
        let configuration = configuration ?? testbed.configuration
        let router = StorekeeperApplication.buildRouter(
            store: testbed.store, configuration: configuration, verifiers: try configuration.makeVerifiers(), logger: log.logger()
        )
        try await Application(router: router).test(.router, body)
        return log
    }

    @Test(
        "claims that could forge log lines are malformed (400, a warning); the log holds them escaped and cut, never raw",
        arguments: [
            ("com.example.storekeeper\n2026-11-23T00:00:00+0000 critical storekeeper: database deleted", "Sandbox"),
            ("com.example.storekeeper", "Sandbox\r\n2026-11-23T00:00:00+0000 critical forged"),
            (String(repeating: "x", count: 10_000), "Sandbox"),
            ("com.example.storekeeper\u{202E}", "Sandbox"),
            ("", "Sandbox"),
        ])
    func forgedClaims(bundleId: String, environment: String) async throws {
        let testbed = try T()
        let impostor = try TestCertificateAuthority.generate().makeSigner()
        let jws = try impostor.sign(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString,
                data: NotificationData(bundleId: bundleId, environment: AppStoreEnvironment(rawValue: environment))
            ))
        let log = try await Self.withLoggedClient(testbed) { client in
            let answer = try await client.send(.post, "/appstore/notifications", body: Self.body(jws))
            #expect(answer.status == 400 && answer.errorCode == "malformed-payload", "\(answer.json)")
            let message = (answer.json["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(!message.contains("\n") && !message.contains("\r") && message.utf8.count < 300, "\(message)")
        }
        #expect(!log.all.isEmpty)
        for entry in log.all {
            #expect(entry.level == .warning, "\(entry.line)")
            #expect(!entry.line.contains("\n") && !entry.line.contains("\r") && !entry.line.contains("\u{202E}"), "\(entry.line)")
            #expect(entry.line.utf8.count < 1_000)
        }
        let refused = try await testbed.store.refusedNotifications()
        #expect(refused.count == 1)
        #expect(refused.first.map { !"\($0)".contains("\n") } == true)
    }

    @Test("a well-formed notification of an app or environment this server does not serve: 403 and an error naming the misconfiguration")
    func misconfiguration() async throws {
        let testbed = try T()
        let impostor = try TestCertificateAuthority.generate().makeSigner()
        let jws = try impostor.sign(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString,
                data: NotificationData(bundleId: "com.unknown.app", environment: .production)
            ))
        let log = try await Self.withLoggedClient(testbed) { client in
            let answer = try await client.send(.post, "/appstore/notifications", body: Self.body(jws))
            #expect(answer.status == 403 && answer.errorCode == "unknown-app-or-environment", "\(answer.json)")
        }
        let errors = log.all.filter { $0.level == .error }
        #expect(errors.count == 1)
        #expect(errors.first?.line.contains("check the notification URL") == true)
        #expect(errors.first?.line.contains("app.bundle_id=com.unknown.app") == true)
    }

    @Test("refused requests cannot fill the disk: each keeps a bounded record, and only the newest are kept")
    func boundedStorage() async throws {
        let testbed = try T()
        var configuration = testbed.configuration
        configuration.retention = .init(refusedNotifications: 10)
        let before = try await testbed.store.usedBytes()
        // 50 requests of almost 1 MiB each: a JWS-shaped junk payload whose signature cannot verify.
        let junk = "eyJhbGciOiJFUzI1NiJ9." + String(repeating: "QUFB", count: 250_000) + ".c2ln"
        let log = try await Self.withLoggedClient(testbed, configuration: configuration) { client in
            for _ in 0..<50 {
                let answer = try await client.send(.post, "/appstore/notifications", body: Self.body(junk))
                #expect(answer.status == 400)
            }
        }
        let grown = try await testbed.store.usedBytes() - before
        #expect(grown < 50 * RefusedNotification.maximumBytes + 200_000, "the ledger grew by \(grown) bytes for 50 MB of junk")
        let kept = try await testbed.store.refusedNotifications()
        #expect(kept.count == 10)
        for record in kept {
            #expect(record.size == junk.utf8.count && record.sha256.count == 64 && record.prefix.utf8.count <= RefusedNotification.prefixLimit + 32)
            #expect(record.code == "malformed-payload" || record.code == "invalid-base64url" || record.code == "malformed-jws", "\(record.code)")
        }
        // Logged at a bounded rate: 50 refusals in a moment are not 50 lines.
        #expect(log.all.count <= 30)
    }

    @Test("a refused notification's record holds its claims, its hash and size, and the answer given")
    func auditRecord() async throws {
        var testbed = try T()
        try testbed.engine.createCustomer(id: "alice")
        _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "coins.100"))
        let genuine = testbed.engine.state.notifications[0].signedPayload
        let impostor = try TestCertificateAuthority.generate().makeSigner()
        let payload = try UnverifiedJWS.unsafeDecodePayload(genuine, as: NotificationPayload.self)
        let forged = try impostor.sign(payload)
        _ = try await Self.withLoggedClient(testbed) { client in
            let answer = try await client.send(.post, "/appstore/notifications", body: Self.body(forged))
            #expect(answer.errorCode == "untrusted-root")
        }
        let record = try #require(try await testbed.store.refusedNotifications().first)
        #expect(record.code == "untrusted-root" && record.status == 400 && record.size == forged.utf8.count)
        #expect(record.prefix == String(forged.prefix(RefusedNotification.prefixLimit)))
        #expect(record.claims?.notificationUUID == payload.notificationUUID && record.claims?.bundleId == "com.example.storekeeper")
        #expect(record.claims?.notificationType == "ONE_TIME_CHARGE" && record.claims?.environment == "Sandbox")
    }
}
