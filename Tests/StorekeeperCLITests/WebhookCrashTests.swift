import AppStoreModels
import AppStoreSimulator
import Foundation
import Logging
import NIOCore
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

@Suite("Crash recovery: webhook deliveries")
struct WebhookCrashTests {
    @Test(
        "serve SIGKILLed after committing events its receiver has not taken yet: restarted, it delivers every one (at least once, each verified)",
        .enabled(if: PythonReceiver.isAvailable, PythonReceiver.missing))
    func killedBetweenCommitAndDelivery() async throws {
        let directory = TestFiles.directory.appendingPathComponent("webhook-kill-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (simulator, _, database) = try CrashRecoveryTests.setUp(in: directory)
        // The receiver refuses the first 40 requests: every event is committed before any is delivered.
        let secret = WebhookSecret.generate()
        let receiver = try PythonReceiver(secret: secret, plan: Array(repeating: "500", count: 40))
        let receiverPort = receiver.port
        let root = directory.appendingPathComponent("sim/ca/root.pem").path
        let config = directory.appendingPathComponent("webhooks.json").path
        try """
        {"apps": [{"bundleId": "com.example.storekeeper", "appAppleId": 6450000001, "environments": ["Production"], "trustedRoots": ["\(root)"]}],
         "webhooks": [{"name": "backend", "url": "http://127.0.0.1:\(receiverPort)/", "secret": "\(secret)", "timeoutSeconds": 2,
                       "retryScheduleSeconds": [0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]}]}
        """.write(toFile: config, atomically: true, encoding: .utf8)
        // Ten customers with server-issued tokens buy; their notifications wait in the simulator.
        let store = try SQLiteLedgerStore(path: database)
        var tokens: [LowercaseUUID] = []
        for index in 0..<10 {
            tokens.append(
                try await store.appAccountToken(for: "user-\(index)", bundleId: "com.example.storekeeper", environment: .production, renew: false))
        }
        await store.close()
        let tokensCopy = tokens
        _ = try await simulator.perform { (engine) throws(SimulatorError) in
            for index in 0..<10 {
                try engine.createCustomer(id: "c\(index)")
                _ = try engine.purchase(.init(customerId: "c\(index)", productId: "pro.monthly", appAccountToken: tokensCopy[index]))
            }
        }
        let server = try await Task.detached { try ServerProcess(config: config, database: database) }.value
        _ = try await simulator.perform { engine in engine.setNotificationURL("http://127.0.0.1:\(server.port)/appstore/notifications") }
        let deliverer = NotificationDeliverer(
            simulator: simulator, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), timeout: .seconds(5))
        _ = await deliverer.deliverDue()
        let acknowledged = await simulator.state.notifications.filter { $0.sendAttempts.last?.sendAttemptResult == "SUCCESS" }.count
        #expect(acknowledged == 10)
        // Killed while its deliveries are still being refused.
        server.kill()
        let events = try await {
            let store = try SQLiteLedgerStore(path: database)
            defer { Task { await store.close() } }
            return try await store.events(after: 0, limit: 100, filter: EventFilter())
        }()
        #expect(events.count == 10)
        let restarted = try await Task.detached { try ServerProcess(config: config, database: database) }.value
        defer { restarted.kill() }
        let deadline = ContinuousClock.now.advanced(by: .seconds(90))
        while !receiver.delivered.isSuperset(of: events.map(\.id.description)), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(
            receiver.delivered.isSuperset(of: events.map(\.id.description)), "every event committed before the kill is delivered after the restart")
    }
}
