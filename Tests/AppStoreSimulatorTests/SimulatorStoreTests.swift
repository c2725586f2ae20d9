import AppStoreModels
import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

/// The simulator's database: what a save writes, what a restart (or another process) reads, and the import of a
/// directory made before the database.
@Suite("Simulator: its database")
struct SimulatorStoreTests {
    typealias H = SimulatorFixture

    static func temporaryDirectory() -> URL {
        TestFiles.directory.appendingPathComponent("simulator-store-\(UUID())")
    }

    /// The state as sorted JSON, to compare two states whole.
    static func json(_ state: SimulatorState) throws -> Data {
        let encoder = AppStoreJSON.makeEncoder()
        encoder.outputFormatting = .sortedKeys
        return try encoder.encode(state)
    }

    @Test("the database syncs its log at every commit (synchronous FULL: GRDB sets NORMAL when it turns WAL on)")
    func commitsAreSynced() throws {
        let directory = Self.temporaryDirectory()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SimulatorStore(path: directory.appendingPathComponent("simulator.sqlite").path)
        #expect(try store.synchronousSetting() == 2)
    }

    @Test("an action writes only the records it changed, however long the history")
    func changesDoNotGrowWithHistory() throws {
        var h = H(environment: .production)
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        _ = h.engine.state.takeChanges()
        func purchaseWrites() throws -> (records: Int, notifications: Int) {
            try h.buy("alice", "coins.100")
            let changes = h.engine.state.takeChanges()
            return (changes.recordCount, changes.notifications.count)
        }
        let early = try purchaseWrites()
        for _ in 0..<300 { try h.buy("alice", "coins.100") }
        try h.advance(days: 100)
        _ = h.engine.state.takeChanges()
        let late = try purchaseWrites()
        // The transaction and its notification; the customer's row only changed on their first purchase.
        #expect(early == (2, 1))
        #expect(late == early)
        try h.engine.recordDeliveryAttempt(notificationUUID: h.engine.state.notifications[5].notificationUUID, result: "SUCCESS")
        let attempt = h.engine.state.takeChanges()
        #expect(attempt.recordCount == 1 && attempt.notifications.keys.sorted() == [5])
    }

    @Test("init makes simulator.sqlite; every action is in the database when perform returns, concurrent ones included")
    func acknowledgedActionsAreCommitted() async throws {
        let url = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: url) }
        let directory = try SimulatorDirectory.initialize(at: url, now: TestAppStore.start)
        #expect(FileManager.default.fileExists(atPath: directory.databaseFile.path))
        #expect(!FileManager.default.fileExists(atPath: directory.stateFile.path))
        let simulator = try Simulator(directory: directory)
        let acknowledged = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<60 {
                group.addTask {
                    try await simulator.perform { (engine) throws(SimulatorError) in
                        try engine.createCustomer(id: "customer-\(index)")
                        return try engine.purchase(.init(customerId: "customer-\(index)", productId: index % 2 == 0 ? "pro.monthly" : "coins.100"))
                            .transactionId
                    }
                }
            }
            var ids: [String] = []
            for try await id in group { ids.append(id) }
            return ids
        }
        // A refused action writes nothing.
        await #expect(throws: SimulatorError.self) {
            try await simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "late")
                _ = try engine.purchase(.init(customerId: "late", productId: "no.such.product"))
            }
        }
        // Another connection (as a restarted process would) reads exactly what was acknowledged; the first is still open.
        let reloaded = try directory.loadState()
        #expect(Set(acknowledged) == Set(reloaded.transactions.keys))
        #expect(reloaded.notifications.count == 60 && reloaded.customers["late"] == nil)
        #expect(try Self.json(reloaded) == Self.json(await simulator.state))
    }

    @Test("a directory made before the database: its state.json (format 1) is imported once, then the database is used")
    func importsStateJSON() async throws {
        let url = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: url) }
        let directory = try SimulatorDirectory.initialize(at: url, environment: .production, now: TestAppStore.start)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: directory.databaseFile.path + suffix) }
        // What an earlier simulator left: its state, written as it wrote state.json.
        var h = H(environment: .production)
        try h.customer("parent")
        try h.customer("kid")
        try h.engine.formFamily(id: "smiths", members: ["parent", "kid"])
        try h.buy("parent", "family.monthly")
        try h.buy("kid", "coins.100", quantity: 3)
        try h.engine.recordDeliveryAttempt(notificationUUID: h.engine.state.notifications[0].notificationUUID, result: "TIMED_OUT")
        try h.engine.requestRefund(transactionId: "2000000000000003", reason: .unintendedPurchase)
        h.engine.recordConsumptionInformation(transactionId: "2000000000000003", body: .object(["customerConsented": .bool(true)]))
        try h.engine.extendAll(productId: "family.monthly", bundleId: TestAppStore.bundleID, days: 3, requestIdentifier: "outage", storefronts: nil)
        try h.advance(days: 40)
        h.engine.state.faults.dropNextNotifications = 2
        h.engine.state.notificationURL = "http://127.0.0.1:9/nowhere"
        let old = h.engine.state
        try AppStoreJSON.makeEncoder(prettyPrinted: true).encode(old).write(to: directory.stateFile)

        let first = try Simulator(directory: directory)
        #expect(try Self.json(await first.state) == Self.json(old))
        #expect(FileManager.default.fileExists(atPath: directory.databaseFile.path))
        #expect(!FileManager.default.fileExists(atPath: directory.stateFile.path))
        #expect(FileManager.default.fileExists(atPath: directory.importedStateFile.path))
        // It goes on from there: counters, indexes (the family) and retries included.
        let next = try await first.perform { (engine) throws(SimulatorError) in
            try engine.purchase(.init(customerId: "kid", productId: "coins.100"))
        }
        #expect(Int64(next.transactionId)! > old.transactions.keys.compactMap { Int64($0) }.max()!)
        #expect(try await first.read { $0.familyMembers(of: "parent") } == ["kid"])
        #expect(try await first.read { $0.state.notifications[0].sendAttempts.map(\.sendAttemptResult) } == ["TIMED_OUT"])

        // A second open reads the database (nothing is imported again).
        let second = try Simulator(directory: directory)
        #expect(try Self.json(await second.state) == Self.json(await first.state))
    }

    @Test("a state.json of another format is refused with a clear message")
    func refusesOtherFormats() throws {
        let url = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: url) }
        let directory = try SimulatorDirectory.initialize(at: url, now: TestAppStore.start)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: directory.databaseFile.path + suffix) }
        try Data(#"{"formatVersion": 2}"#.utf8).write(to: directory.stateFile)
        let error = #expect(throws: SimulatorError.self) { try Simulator(directory: directory) }
        #expect(error?.code == .conflict && error?.message.contains("format 2") == true)
        #expect(throws: SimulatorError.self) { try SimulatorDirectory.initialize(at: url) }
    }
}
