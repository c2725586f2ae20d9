import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// `storekeeper serve` as a child process that a test can kill with SIGKILL.
struct ServerProcess {
    let process: ChildProcess
    let port: Int

    /// Starts it; blocks until it has said its port (call it from `Task.detached`).
    init(config: String, database: String) throws {
        (process, port) = try CLI.startReportingPort(["serve", "--config", config, "--database", database, "--port", "0"])
    }

    func kill() { process.kill() }

    struct CLIError: Error { var message: String }
}

@Suite("Crash recovery")
struct CrashRecoveryTests {
    /// A production simulator, a configuration that trusts it, and where the ledger goes.
    static func setUp(in directory: URL) throws -> (Simulator, config: String, database: String) {
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), environment: .production)
        let simulator = try Simulator(directory: simulatorDirectory)
        let config = directory.appendingPathComponent("config.json").path
        try """
        {"apps": [{"bundleId": "com.example.storekeeper", "appAppleId": 6450000001, "environments": ["Production"],
                   "trustedRoots": ["\(simulatorDirectory.rootCertificateFile.path)"]}],
         "entitlements": {"productEntitlements": {}, "subscriptionLevels": {}, "nonRenewingDurations": {}, "billingRetryGrantsAccess": false},
         "apiKeys": []}
        """.write(toFile: config, atomically: true, encoding: .utf8)
        return (simulator, config, directory.appendingPathComponent("ledger.sqlite").path)
    }

    /// `count` customers each buy one product (their notifications wait in the simulator for delivery).
    static func sell(_ count: Int, on simulator: Simulator, product: @escaping @Sendable (Int) -> String) async throws {
        _ = try await simulator.perform { (engine) throws(SimulatorError) in
            for index in 0..<count {
                try engine.createCustomer(id: "c\(index)")
                _ = try engine.purchase(.init(customerId: "c\(index)", productId: product(index)))
            }
        }
    }

    /// Returns once the simulator has tried to deliver at least `count` notifications.
    static func waitForAttempts(on simulator: Simulator, atLeast count: Int) async throws {
        while await simulator.state.notifications.filter({ !$0.sendAttempts.isEmpty }).count < count {
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test("SIGTERM during a burst: the server finishes what it is answering and exits 0; every notification it acknowledged is in the ledger")
    func sigtermDuringBurst() async throws {
        let directory = TestFiles.directory.appendingPathComponent("term-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (simulator, config, database) = try Self.setUp(in: directory)
        try await Self.sell(60, on: simulator) { _ in "pro.monthly" }
        let server = try await Task.detached { try ServerProcess(config: config, database: database) }.value
        _ = try await simulator.perform { engine in engine.setNotificationURL("http://127.0.0.1:\(server.port)/appstore/notifications") }
        let deliverer = NotificationDeliverer(
            simulator: simulator, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), timeout: .seconds(5))
        async let delivered = deliverer.deliverDue()
        try await Self.waitForAttempts(on: simulator, atLeast: 15)
        server.process.signal(SIGTERM)
        let status = await server.process.wait()
        _ = await delivered
        #expect(status == .exited(0))
        let acknowledged = await simulator.state.notifications.filter { $0.sendAttempts.last?.sendAttemptResult == "SUCCESS" }.count
        #expect(acknowledged >= 15)
        let counts = try await SQLiteLedgerStore(path: database).notificationCounts()
        #expect((counts["applied"] ?? 0) >= acknowledged, "\(counts), \(acknowledged) acknowledged")
    }

    @Test("a server killed with SIGKILL during a burst, restarted and fed the simulator's retries, loses nothing and applies nothing twice")
    func sigkillDuringBurst() async throws {
        let directory = TestFiles.directory.appendingPathComponent("crash-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (simulator, config, database) = try Self.setUp(in: directory)

        // A burst of 60 notifications.
        try await Self.sell(60, on: simulator) { $0 % 2 == 0 ? "coins.100" : "pro.monthly" }
        let total = await simulator.state.notifications.count
        var server = try await Task.detached { try ServerProcess(config: config, database: database) }.value
        _ = try await simulator.perform { engine in engine.setNotificationURL("http://127.0.0.1:\(server.port)/appstore/notifications") }
        let deliverer = NotificationDeliverer(
            simulator: simulator, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), timeout: .seconds(5))

        // Kill the server partway through the burst.
        async let delivered = deliverer.deliverDue()
        try await Self.waitForAttempts(on: simulator, atLeast: 15)
        server.kill()
        _ = await delivered
        let afterCrash = await simulator.state.notifications
        let failed = afterCrash.filter { $0.sendAttempts.last?.sendAttemptResult != "SUCCESS" }.count
        #expect(failed > 0, "the kill came too late to interrupt the burst")

        // Restart on the same database; Apple's retry comes an hour later.
        server = try await Task.detached { try ServerProcess(config: config, database: database) }.value
        _ = try await simulator.perform { (engine) throws(SimulatorError) in
            engine.setNotificationURL("http://127.0.0.1:\(server.port)/appstore/notifications")
            try engine.advance(by: 3600)
        }
        await deliverer.deliverDue()
        server.kill()

        let final = await simulator.state.notifications
        #expect(final.count == total)
        #expect(final.allSatisfy { $0.sendAttempts.last?.sendAttemptResult == "SUCCESS" })
        let store = try SQLiteLedgerStore(path: database)
        let counts = try await store.notificationCounts()
        #expect(counts["applied"] == total, "\(counts)")  // every notification applied exactly once
    }
}
