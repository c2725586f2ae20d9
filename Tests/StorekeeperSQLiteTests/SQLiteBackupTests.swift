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

    @Test("a backup writes nothing to its source: its schema and its bytes are as they were")
    func sourceUntouched() async throws {
        let path = Self.temporaryPath("untouched")
        await (try SQLiteLedgerStore(path: path)).close()
        func schemaVersion() throws -> Int {
            var configuration = Configuration()
            configuration.readonly = true
            return try DatabaseQueue(path: path, configuration: configuration).read { db in try Int.fetchOne(db, sql: "PRAGMA schema_version") ?? -1 }
        }
        let (version, bytes) = (try schemaVersion(), try Data(contentsOf: URL(fileURLWithPath: path)))
        for round in 0..<2 { _ = try SQLiteLedgerStore.backup(database: path, to: Self.temporaryPath("copy-\(round)")) }
        #expect(try schemaVersion() == version)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes)
    }

    @Test("opening an existing ledger (its log empty or gone) leaves its schema version and rows as they were")
    func openingKeepsSchemaVersion() async throws {
        let path = Self.temporaryPath("reopened")
        let store = try SQLiteLedgerStore(path: path)
        let token = try await store.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        await store.close()
        func look() throws -> (version: Int, user: Int, tokens: Int) {
            var configuration = Configuration()
            configuration.readonly = true
            return try DatabaseQueue(path: path, configuration: configuration).read { db in
                (
                    try Int.fetchOne(db, sql: "PRAGMA schema_version") ?? -1, try Int.fetchOne(db, sql: "PRAGMA user_version") ?? -1,
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM issued_tokens") ?? -1
                )
            }
        }
        let before = try look()
        #expect(before.tokens == 1)
        for round in 0..<4 {
            if round == 3 {
                // Another tool's copy, in another journal mode.
                try await DatabaseQueue(path: path).writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
                #expect(try look().version == before.version)
            }
            #expect((try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0 == 0)
            let reopened = try SQLiteLedgerStore(path: path)
            #expect(
                try await reopened.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false) == token)
            await reopened.close()
            let after = try look()
            #expect(after.version == before.version && after.user == before.user && after.tokens == 1, "\(after) after \(before)")
        }
    }

    @Test("a store closed without checkpointing leaves a running server's log alone; a checkpointing close empties it")
    func closeBesideServer() async throws {
        let path = Self.temporaryPath("beside")
        let server = try SQLiteLedgerStore(path: path)
        let token = try await server.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        func logSize() -> Int { (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0 }
        let before = logSize()
        #expect(before > 0)
        let command = try SQLiteLedgerStore(path: path, creating: false)
        #expect(try await command.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false) == token)
        await command.close(checkpointing: false)
        #expect(logSize() == before)
        // The server goes on writing.
        _ = try await server.appAccountToken(for: "bob", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        await server.close()
        #expect(logSize() == 0)
    }

    @Test("refusals name what is wrong and leave no file behind: missing source, existing destination, not a ledger")
    func refusals() throws {
        let missing = Self.temporaryPath("missing")
        let destination = Self.temporaryPath("destination")
        var error = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: missing, to: destination) }
        #expect(error?.message == "no database at '\(missing)'")
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
        #expect(
            error?.message.contains("is a SQLite database but not a Storekeeper ledger (its tables: notes)") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: target))

        let garbage = Self.temporaryPath("garbage")
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: garbage))
        error = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: garbage, to: target) }
        #expect(error?.message.hasPrefix("cannot open the SQLite database at \(garbage)") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: target))
    }
}
