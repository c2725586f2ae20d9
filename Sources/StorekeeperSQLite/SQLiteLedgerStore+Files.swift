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
    /// Refuses a ledger path this process cannot use, in words an operator can act on, before SQLite is asked (whose
    /// own error is `SQLite error 8 … PRAGMA synchronous = FULL` for a read-only directory): the directory must be
    /// writable (SQLite writes its `-wal` and `-shm` files beside the ledger), the file readable and writable, and
    /// not a directory.
    package static func checkAccess(_ path: String) throws(StorageError) {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard !isDirectory.boolValue else { throw isADirectory(path) }
            // A device or a pipe: SQLite would write its journal and the lock file beside it (`/dev/zero-journal`), or
            // block opening a pipe.
            guard LocalFile.isRegular(path) else { throw notARegularFile(path) }
            guard access(path, R_OK | W_OK) == 0 else {
                throw StorageError(
                    "the SQLite ledger \(path) cannot be read and written by this process (\(String(cString: strerror(errno))))"
                        + "\(LocalFile.owner(of: path).map { "; it is \($0)" } ?? ""): run as the ledger's owner, or give this user read and write permission"
                )
            }
            // The write-ahead log's two files, left by an earlier process: SQLite would only say the database is read-only.
            for (suffix, advice) in [
                ("-wal", "give it back read and write permission (never delete it: it may hold committed transactions)"),
                ("-shm", "give it back read and write permission, or delete it while no process has the ledger open"),
            ] where FileManager.default.fileExists(atPath: path + suffix) && access(path + suffix, R_OK | W_OK) != 0 {
                throw StorageError(
                    "the SQLite ledger's file \(path + suffix) cannot be read and written by this process (\(String(cString: strerror(errno)))): \(advice)"
                )
            }
        }
        // The directory matters only for the log's files: SQLite makes them when they are not there.
        let logFilesThere = [path + "-wal", path + "-shm"].allSatisfy { FileManager.default.fileExists(atPath: $0) }
        if !logFilesThere, FileManager.default.fileExists(atPath: directory), access(directory, W_OK | X_OK) != 0 {
            throw StorageError(
                "the directory \(directory) of the SQLite ledger is not writable by this process (\(String(cString: strerror(errno)))): "
                    + "SQLite keeps its write-ahead log (-wal and -shm files) beside the ledger"
            )
        }
    }

    /// The error for a directory given as the ledger, with the path of a file in it to give instead.
    static func isADirectory(_ path: String) -> StorageError {
        let inside = URL(fileURLWithPath: path).appendingPathComponent("storekeeper.sqlite").path
        return StorageError("the SQLite ledger \(path) is a directory: give the path of a file (e.g. \(inside))")
    }

    /// The error for a device or a pipe given as the ledger.
    static func notARegularFile(_ path: String) -> StorageError {
        StorageError("\(path) is not a regular file (a device or a pipe?): give the ledger's file")
    }

    /// ``checkAccess(_:)`` for a ledger opened to read only: the file must be readable; its directory and log files
    /// need not be writable when the log files are there (a server running on it, or a copy with them).
    package static func checkReadAccess(_ path: String) throws(StorageError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw StorageError("no database at \(UntrustedText.quoted(path, limit: 256))")
        }
        guard !isDirectory.boolValue else { throw isADirectory(path) }
        guard LocalFile.isRegular(path) else { throw notARegularFile(path) }
        for file in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            guard access(file, R_OK) == 0 else {
                throw StorageError(
                    "the SQLite ledger's file \(file) cannot be read by this process (\(String(cString: strerror(errno))))"
                        + "\(LocalFile.owner(of: file).map { "; it is \($0)" } ?? ""): run as its owner, or give this user read permission")
            }
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        let logFiles = [path + "-wal", path + "-shm"]
        if logFiles.contains(where: { !FileManager.default.fileExists(atPath: $0) }), access(directory, W_OK | X_OK) != 0 {
            throw StorageError(
                "the SQLite ledger \(path) has no -wal and -shm files beside it, and this process may not create them in \(directory) "
                    + "(\(String(cString: strerror(errno)))): SQLite needs them to read a ledger in WAL mode, even to read only; "
                    + "run the command as a user who may write that directory, or while the server runs on the ledger (it keeps them there)")
        }
    }

    /// The error for a ledger opened to read only that an older Storekeeper left: reading does not migrate it.
    static func needsMigrating(_ path: String) -> StorageError {
        StorageError(
            "the SQLite ledger \(path) was written by an older Storekeeper and needs migrating, which a command that only reads does not do: "
                + "start `storekeeper serve` on it once (back it up first with `storekeeper backup`)")
    }

    /// The error for a ledger a newer Storekeeper migrated: its migrations this version does not know.
    static func migratedByNewerVersion(_ path: String, unknown: Set<String>) -> StorageError {
        StorageError(
            "cannot open the SQLite database at \(path): it was migrated by a newer Storekeeper (migrations this version does not know: "
                + "\(unknown.sorted().joined(separator: ", "))); run that version, or restore a backup made with this one"
        )
    }

    /// For an existing ledger whose write-ahead log is missing or empty (turned to WAL mode first, if it was in another): a connection that wrote one frame to the log
    /// (page 1 with the same `user_version`: no row, table or schema version changes), to keep open while the pool
    /// opens. `nil` for a new file, or when the log already holds frames.
    static func fillingEmptyLog(_ path: String, configuration: Configuration) throws -> DatabaseQueue? {
        let log = path + "-wal"
        let size = { (path: String) in (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }
        guard size(path) > 0, size(log) == 0 else { return nil }
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        do {
            try queue.writeWithoutTransaction { db in
                // A ledger copied by another tool may be in another journal mode: turned to WAL here, as the pool would.
                guard try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL") == "wal" else { return }
                let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
                try db.execute(sql: "PRAGMA user_version = \(version)")
            }
        } catch {
            try? queue.close()
            throw error
        }
        return queue
    }

    /// Refuses a file that is not a Storekeeper ledger, reading it without changing it: another program's SQLite
    /// database, a simulator's, or (unless `creating`) one that holds no ledger yet (a new or empty file). Opening it
    /// as the ledger would turn on WAL (which rewrites its header) and migrate it.
    static func checkIsLedger(_ path: String, creating: Bool) throws(StorageError) {
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        guard FileManager.default.fileExists(atPath: path), size > 0 else {
            if creating { return }
            throw StorageError(
                "\(path) holds no ledger (an empty database): give the ledger's path (only `storekeeper serve` creates a ledger); nothing was changed"
            )
        }
        let (migrations, tables): ([String], [String])
        do {
            var configuration = Configuration()
            configuration.readonly = true
            // A server may be writing the ledger (`recover` and `reconcile` run beside `serve`): wait for its locks as
            // the store's own connections do, rather than fail at once with "database is locked".
            configuration.busyMode = .timeout(10)
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? queue.close() }
            (migrations, tables) = try queue.read { db in
                let tables = try String.fetchAll(
                    db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
                let migrations = tables.contains("grdb_migrations") ? try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") : []
                return (migrations, tables)
            }
        } catch {
            throw StorageError("cannot open the SQLite database at \(path): \(explain(error, path: path) ?? "\(error)")", underlying: error)
        }
        if migrations.isEmpty, !tables.isEmpty {
            throw StorageError(
                "\(path) is a SQLite database but not a Storekeeper ledger (its tables: \(tables.prefix(5).joined(separator: ", "))\(tables.count > 5 ? ", …" : "")): "
                    + "give the ledger's path; nothing was changed"
            )
        }
        // Refused here, from the read-only look, before the ledger is opened for writing (which would turn on WAL and
        // checkpoint: an older binary must leave a newer ledger exactly as it found it).
        let unknown = Set(migrations).subtracting(migrator.migrations)
        if !unknown.isEmpty, !Set(migrations).isDisjoint(with: migrator.migrations) { throw migratedByNewerVersion(path, unknown: unknown) }
        if !migrations.isEmpty, Set(migrations).isDisjoint(with: migrator.migrations) {
            throw StorageError(
                "\(path) is not a Storekeeper ledger (its migrations: \(migrations.sorted().prefix(3).joined(separator: ", ")); a simulator's own database is "
                    + "DIR/simulator.sqlite): give the ledger's path; nothing was changed"
            )
        }
        if migrations.isEmpty, !creating {
            throw StorageError(
                "\(path) holds no ledger (an empty database): give the ledger's path (only `storekeeper serve` creates a ledger); nothing was changed"
            )
        }
    }

    /// Whether a write failed because of the file, the disk or the file system, not the write itself: what `/health`
    /// reports (``WriteFaults``). Each has a text of ``explain(_:path:)``.
    static func isDatabaseFault(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        return [.SQLITE_FULL, .SQLITE_READONLY, .SQLITE_NOTADB, .SQLITE_CANTOPEN, .SQLITE_IOERR, .SQLITE_CORRUPT].contains(error.resultCode)
    }

    /// A SQLite failure in words, when it is one an operator can act on; nil otherwise.
    static func explain(_ error: any Error, path: String) -> String? {
        guard let error = error as? DatabaseError else { return nil }
        switch error.resultCode {
        case .SQLITE_FULL:
            return "the disk holding the SQLite ledger \(path) is full: nothing was written; free some space"
        case .SQLITE_READONLY:
            return "the SQLite ledger \(path) or its directory is read-only for this process (a read-only file system, or the file's owner)"
        case .SQLITE_NOTADB:
            return "\(path) is not a SQLite database (is --database the right file?)"
        case .SQLITE_CANTOPEN:
            return "the SQLite ledger \(path) cannot be opened (its directory missing or not writable?)"
        case .SQLITE_IOERR:
            return "the disk holding the SQLite ledger \(path) failed to read or write (\(error.message ?? "I/O error")); nothing was acknowledged"
        case .SQLITE_CORRUPT:
            return "the SQLite ledger \(path) is corrupt: restore it from a backup (storekeeper backup)"
        default:
            return nil
        }
    }
}

extension SQLiteLedgerStore {
    /// Moves every commit from the write-ahead log into the file itself and empties the log (so a copy of the
    /// `.sqlite` file alone, taken after a server stopped, holds everything), then closes the connections. The store
    /// is unusable afterwards.
    package func close() async {
        await close(checkpointing: true)
    }

    /// Closes the connections; with `checkpointing`, after emptying the log as ``close()`` does. A command that may run
    /// beside a server (`events list`, `recover`) closes without: that checkpoint would hold the server's writer
    /// until every frame is copied, and SQLite checkpoints by itself when the last connection to the file closes.
    package func close(checkpointing: Bool) async {
        if checkpointing {
            _ = try? await pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        }
        try? pool.close()
    }
}
