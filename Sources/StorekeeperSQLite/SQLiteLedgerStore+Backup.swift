import AppStoreModels
import Foundation
import GRDB
package import StorekeeperCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension SQLiteLedgerStore {
    /// What a backup copied.
    package struct BackupSummary: Sendable, Codable, Equatable {
        package var notifications: Int
        package var transactions: Int
        package var customers: Int
        package var bytes: Int
        /// The schema migrations the copy carries, oldest first.
        package var migrations: [String]
    }

    /// Copies the ledger at `path`, as of one moment, into a new SQLite file at `destination`, while a server may
    /// go on writing to it: SQLite's online backup reads one snapshot (WAL mode), so the copy is consistent and
    /// the server is never blocked. The source is not migrated or changed; an existing `destination` is never
    /// overwritten, and a failed backup leaves no file behind.
    package static func backup(database path: String, to destination: String) throws(StorageError) -> BackupSummary {
        let files = FileManager.default
        // Missing, a directory, unreadable, or without the log files SQLite needs and a directory to make them in: said
        // in words (a directory read as a database was "a disk I/O error").
        try checkReadAccess(path)
        // What the file holds, from a read-only look: another program's database, or a ledger a newer Storekeeper
        // migrated, is refused before anything opens it for writing.
        try checkIsLedger(path, creating: false)
        guard !files.fileExists(atPath: destination) else {
            throw StorageError("\(destination) already exists; a backup never overwrites a file")
        }
        let directory = URL(fileURLWithPath: destination).deletingLastPathComponent().path
        var isDirectory: ObjCBool = false
        guard files.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw StorageError("the backup's directory \(directory) does not exist")
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw StorageError("the backup's directory \(directory) is not writable by this process (\(String(cString: strerror(errno))))")
        }
        do {
            // A read-only connection: a pool's writer would write to the source as it opens (GRDB makes sure its WAL
            // is not empty with a table made and dropped). SQLite's online backup in one step reads one snapshot.
            var configuration = Configuration()
            configuration.readonly = true
            configuration.busyMode = .timeout(10)
            let source = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? source.close() }
            let isLedger = try source.read { db in try db.tableExists("transactions") && db.tableExists("grdb_migrations") }
            guard isLedger else { throw StorageError("\(path) is not a Storekeeper ledger (no transactions or migrations table)") }
            let copy = try DatabaseQueue(path: destination)
            try source.backup(to: copy)
            let summary = try copy.read { db in
                BackupSummary(
                    notifications: try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM notifications") ?? 0,
                    transactions: try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM transactions") ?? 0,
                    // A ledger of an older schema (backed up before this version migrated it) has `tokens`.
                    customers: try Int.fetchOne(
                        db,
                        sql: """
                            SELECT COUNT(*) FROM (SELECT customer_id FROM customer_links UNION SELECT customer_id FROM \(
                            try db.tableExists("token_owners") ? "token_owners" : "tokens"))
                            """) ?? 0,
                    bytes: 0,
                    migrations: try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid")
                )
            }
            try copy.close()
            var result = summary
            result.bytes = (try? files.attributesOfItem(atPath: destination)[.size] as? Int) ?? 0
            return result
        } catch {
            for suffix in ["", "-wal", "-shm"] { try? files.removeItem(atPath: destination + suffix) }
            if let error = error as? StorageError { throw error }
            throw StorageError("backup of \(path) to \(destination) failed: \(explain(error, path: path) ?? "\(error)")", underlying: error)
        }
    }
}
