import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperSQLite

/// SQLite has one writer: notifications that arrive while it commits are applied together next (group commit).
@Suite("SQLite ledger: group commit")
struct SQLiteGroupCommitTests {
    typealias H = SimulatorFixture

    static func temporaryPath() -> String {
        TestFiles.directory.appendingPathComponent("group-\(UUID()).sqlite").path
    }

    @Test("the writer syncs its log at every commit (synchronous FULL: GRDB sets NORMAL when it turns WAL on), also when reopened")
    func writerSyncsEveryCommit() async throws {
        let path = Self.temporaryPath()
        let store = try SQLiteLedgerStore(path: path)
        #expect(try await store.writerSynchronous() == 2)
        await store.close()
        let reopened = try SQLiteLedgerStore(path: path, creating: false)
        #expect(try await reopened.writerSynchronous() == 2)
        await reopened.close()
    }

    @Test("notifications arriving together are applied in batches, each once, the same ledger as one by one; one the database refuses fails alone")
    func batchedNotifications() async throws {
        var harness = H()
        for index in 0..<15 {
            try harness.engine.createCustomer(id: "b\(index)")
            _ = try harness.engine.purchase(.init(customerId: "b\(index)", productId: index % 3 == 0 ? "coins.100" : "pro.monthly"))
        }
        try harness.engine.advance(by: 65 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        let refused = notifications[notifications.count / 2].payload.notificationUUID
        let reference = try SQLiteLedgerStore(path: Self.temporaryPath())
        for notification in notifications where notification.payload.notificationUUID != refused { _ = try await reference.apply(notification) }

        let store = try SQLiteLedgerStore(
            path: Self.temporaryPath(),
            unsafeFaultInjection: { point in
                if point == "notification \(refused)" { throw StorageError("refused by the test") }
            })
        let outcomes = await store.applyAllAtOnce((notifications + notifications).shuffled())
        let written = store.notificationBatcher.completed
        #expect(written.items == notifications.count * 2 && written.batches < written.items, "\(written)")
        // The refused notification failed both times; every other was applied once, then a duplicate.
        for (uuid, result) in outcomes where uuid == refused {
            #expect(throws: StorageError.self) { try result.get() }
        }
        let others = outcomes.filter { $0.0 != refused }
        #expect(others.allSatisfy { (try? $0.1.get()) != nil })
        #expect(others.filter { (try? $0.1.get()) != .duplicate }.count == notifications.count - 1)
        #expect(Set(others.filter { (try? $0.1.get()) != .duplicate }.map(\.0)).count == notifications.count - 1)
        #expect(try await store.containsNotification(refused) == false)
        #expect(try await store.notificationCounts() == reference.notificationCounts())
        for index in 0..<15 {
            let expected = try await reference.ledger(for: "b\(index)", bundleId: "com.example.storekeeper", environment: .sandbox)
            let ledger = try await store.ledger(for: "b\(index)", bundleId: "com.example.storekeeper", environment: .sandbox)
            #expect(Ledger.differences(ledger, expected).isEmpty, "b\(index): \(Ledger.differences(ledger, expected))")
        }
        await store.close()
        await reference.close()
    }
}
