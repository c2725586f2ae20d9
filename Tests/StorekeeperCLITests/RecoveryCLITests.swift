import AppStoreModels
import AppStoreSimulator
import Foundation
import Hummingbird
import Logging
import NIOCore
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// A sandbox simulator served on loopback whose notifications all failed (nothing listened), and a configuration
/// whose App Store Server API credentials point at it.
struct MissedNotifications {
    let directory: URL
    let simulator: Simulator
    let deliverer: NotificationDeliverer
    let config: String
    let database: String
    let total: Int

    /// `count` customers each buy one product while no server listens.
    static func make(_ count: Int, in directory: URL) async throws -> MissedNotifications {
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), environment: .sandbox)
        let simulator = try Simulator(directory: simulatorDirectory)
        let deliverer = NotificationDeliverer(
            simulator: simulator, logger: Logger(label: "d", factory: { _ in SwiftLogNoOpLogHandler() }), timeout: .seconds(2))
        _ = try await simulator.perform { (engine) throws(SimulatorError) in
            engine.setNotificationURL("http://127.0.0.1:9/appstore/notifications")
            for index in 0..<count {
                try engine.createCustomer(id: "c\(index)")
                _ = try engine.purchase(.init(customerId: "c\(index)", productId: index % 2 == 0 ? "coins.100" : "pro.monthly"))
            }
        }
        await deliverer.deliverDue()
        let key = try simulatorDirectory.loadAPIKeyInfo()
        return MissedNotifications(
            directory: directory, simulator: simulator, deliverer: deliverer, config: directory.appendingPathComponent("config.json").path,
            database: directory.appendingPathComponent("ledger.sqlite").path, total: await simulator.state.notifications.count,
            keyFile: simulatorDirectory.apiPrivateKeyFile(keyId: key.keyId).path, key: key, root: simulatorDirectory.rootCertificateFile.path
        )
    }

    private let keyFile: String
    private let key: SimulatorDirectory.APIKeyInfo
    private let root: String

    init(
        directory: URL, simulator: Simulator, deliverer: NotificationDeliverer, config: String, database: String, total: Int, keyFile: String,
        key: SimulatorDirectory.APIKeyInfo, root: String
    ) {
        self.directory = directory
        self.simulator = simulator
        self.deliverer = deliverer
        self.config = config
        self.database = database
        self.total = total
        self.keyFile = keyFile
        self.key = key
        self.root = root
    }

    /// Writes the configuration for a simulator served at `baseURL`.
    func writeConfig(baseURL: String) throws {
        try """
        {"apps": [{"bundleId": "com.example.storekeeper", "appAppleId": 6450000001, "environments": ["Sandbox"],
                   "trustedRoots": ["\(root)"],
                   "serverAPI": {"Sandbox": {"issuerId": "\(key.issuerId)", "keyId": "\(key.keyId)", "privateKeyFile": "\(keyFile)", "baseURL": "\(baseURL)"}}}],
         "recovery": {"intervalSeconds": 0.2, "failuresIntervalSeconds": 3600}}
        """.write(toFile: config, atomically: true, encoding: .utf8)
    }

    /// Serves the simulator for `body` (its base URL).
    func serve(_ body: @Sendable @escaping (String) async throws -> Void) async throws {
        let ports = AsyncStream<Int>.makeStream()
        let app = SimulatorApplication.build(
            simulator: simulator, deliverer: deliverer, port: 0, logger: Logger(label: "s", factory: { _ in SwiftLogNoOpLogHandler() })
        ) { ports.continuation.yield($0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.runService(gracefulShutdownSignals: []) }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            try writeConfig(baseURL: "http://127.0.0.1:\(port)")
            try await body("http://127.0.0.1:\(port)")
            group.cancelAll()
        }
    }

    /// Notifications in the ledger so far (0 before it exists).
    func inLedger() async throws -> Int {
        guard FileManager.default.fileExists(atPath: database) else { return 0 }
        let counts = try await SQLiteLedgerStore(path: database).notificationCounts()
        return (counts["applied"] ?? 0) + (counts["recorded"] ?? 0)
    }
}

@Suite("storekeeper recover and reconcile")
struct RecoveryCLITests {
    @Test("SIGKILL of serve during recovery: after restart it resumes from the watermark; nothing is lost or applied twice")
    func sigkillDuringRecovery() async throws {
        let directory = try CLI.temporaryDirectory("recover-kill")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(300, in: directory)
        try await missed.serve { _ in
            // Sandbox rates (5 calls/s) make 15 pages take a few seconds: time enough to kill the server halfway.
            let first = try await Task.detached { try ServerProcess(config: missed.config, database: missed.database) }.value
            while try await missed.inLedger() < 40 { try await Task.sleep(for: .milliseconds(20)) }
            first.kill()
            let partial = try await missed.inLedger()
            #expect(partial < missed.total, "the kill came after the whole run")
            let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)
            #expect(try await SQLiteLedgerStore(path: missed.database).recoveryWatermark(app) == nil, "the watermark moves only with the last page")

            let second = try await Task.detached { try ServerProcess(config: missed.config, database: missed.database) }.value
            let deadline = ContinuousClock.now + .seconds(60)
            while try await missed.inLedger() < missed.total, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            second.kill()
            let store = try SQLiteLedgerStore(path: missed.database)
            let counts = try await store.notificationCounts()
            #expect((counts["applied"] ?? 0) + (counts["recorded"] ?? 0) == missed.total, "\(counts)")
            #expect(try await store.recoveryWatermark(app) != nil)
            // Every notification is there once: the simulator's UUIDs, each found.
            for notification in await missed.simulator.state.notifications {
                #expect(try await store.containsNotification(notification.notificationUUID))
            }
        }
    }

    @Test(
        "storekeeper recover --dry-run reports what the ledger lacks and changes nothing; recover applies it; reconcile --all --dry-run then finds no drift"
    )
    func commands() async throws {
        let directory = try CLI.temporaryDirectory("recover-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(12, in: directory)
        try await missed.serve { _ in
            // A mistyped ledger path is refused by every command but serve, never created empty (a dry run on an empty
            // ledger would report everything missing, and a real run would fill the wrong file).
            for command in [["recover", "--dry-run"], ["recover"], ["reconcile", "--all", "--dry-run"], ["reconcile", "--customer", "c1"]] {
                let typo = try await CLI.runDetached(command + ["--config", missed.config, "--database", missed.database + ".typo"])
                #expect(
                    typo.status == 1 && typo.stderr.contains("error: no-such-ledger: no SQLite ledger at '\(missed.database).typo'"),
                    "\(command): \(typo.stderr)")
                #expect(!FileManager.default.fileExists(atPath: missed.database + ".typo"))
            }
            _ = try SQLiteLedgerStore(path: missed.database)  // the ledger, as `serve` creates it
            let dry = try await CLI.runDetached(["recover", "--config", missed.config, "--database", missed.database, "--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr)")
            let report = try CLI.json(dry.stdout)
            #expect(report["missingCount"] as? Int == missed.total && report["dryRun"] as? Bool == true, "\(dry.stdout)")
            #expect(try await missed.inLedger() == 0)
            let real = try await CLI.runDetached(["recover", "--config", missed.config, "--database", missed.database])
            #expect(real.status == 0, "\(real.stderr)")
            #expect(try CLI.json(real.stdout)["applied"] as? Int == missed.total, "\(real.stdout)")
            #expect(try await missed.inLedger() == missed.total)
            let reconcile = try await CLI.runDetached(["reconcile", "--config", missed.config, "--database", missed.database, "--all", "--dry-run"])
            #expect(reconcile.status == 0, "\(reconcile.stderr)")
            let drift = try CLI.json(reconcile.stdout)
            #expect((drift["purchases"] as? Int ?? 0) > 0 && (drift["drift"] as? [Any])?.isEmpty == true, "\(reconcile.stdout)")
            #expect(reconcile.stderr.contains("purchases/s"), "the progress line: \(reconcile.stderr)")
        }
        // Wrong use is named.
        let both = try await CLI.runDetached(["reconcile", "--config", missed.config, "--all", "--customer", "x"])
        #expect(both.status != 0 && both.stderr.contains("exactly one of"))
    }
}
