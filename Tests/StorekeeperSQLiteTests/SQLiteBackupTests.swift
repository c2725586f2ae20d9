import AppStoreModels
import AppStoreSimulator
import Foundation
import GRDB
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperSQLite

@Suite("SQLite ledger: online backup")
struct SQLiteBackupTests {
    static func temporaryPath(_ name: String) -> String {
        TestFiles.directory.appendingPathComponent("\(name)-\(UUID()).sqlite").path
    }

    @Test("a backup taken while notifications are being applied is a consistent ledger; after the writes it equals the source")
    func whileWriting() async throws {
        var harness = SimulatorFixture()
        try await harness.play("subscriber-lifecycle")
        let notifications = try await harness.verifiedNotifications()
        let path = Self.temporaryPath("source")
        let store = try SQLiteLedgerStore(path: path)
        try await harness.submitAll(to: store)
        let customers = harness.engine.groundTruth().map(\.customerId)

        // During the writes: the copy opens as a ledger, passes SQLite's integrity check, and holds a prefix.
        let during = Self.temporaryPath("during")
        async let writes: Void = { for notification in notifications { _ = try await store.apply(notification) } }()
        let summary = try SQLiteLedgerStore.backup(database: path, to: during)
        try await writes
        #expect(summary.notifications <= notifications.count)
        #expect(summary.migrations == SQLiteLedgerStore.migrator.migrations)
        let integrity = try await DatabaseQueue(path: during).read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") }
        #expect(integrity == "ok")

        // After the writes: every customer's ledger in the copy equals the source's.
        let after = Self.temporaryPath("after")
        let final = try SQLiteLedgerStore.backup(database: path, to: after)
        #expect(final.notifications == notifications.count)
        #expect(final.transactions > 0 && final.customers == customers.count && final.bytes > 0)
        let copy = try SQLiteLedgerStore(path: after)
        #expect(copy.migrationsApplied.isEmpty)
        for customer in customers {
            #expect(
                try await copy.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                    == (try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)))
        }
        #expect(try await copy.notificationCounts() == (try await store.notificationCounts()))
    }

    @Test("refusals name what is wrong and leave no file behind: missing source, existing destination, not a ledger")
    func refusals() throws {
        let missing = Self.temporaryPath("missing")
        let destination = Self.temporaryPath("destination")
        var error = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: missing, to: destination) }
        #expect(error?.message == "no database at \(missing)")
        #expect(!FileManager.default.fileExists(atPath: destination))

        let source = Self.temporaryPath("source")
        _ = try SQLiteLedgerStore(path: source)
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: destination))
        error = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: source, to: destination) }
        #expect(error?.message.contains("already exists") == true)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "keep me")

        let other = Self.temporaryPath("other")
        try DatabaseQueue(path: other).write { db in try db.execute(sql: "CREATE TABLE notes (text TEXT)") }
        let target = Self.temporaryPath("target")
        error = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: other, to: target) }
        #expect(error?.message.contains("is not a Storekeeper ledger") == true)
        #expect(!FileManager.default.fileExists(atPath: target))

        let garbage = Self.temporaryPath("garbage")
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: garbage))
        error = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: garbage, to: target) }
        #expect(error?.message.contains("failed") == true)
        #expect(!FileManager.default.fileExists(atPath: target))
    }
}
