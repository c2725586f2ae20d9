import AppStoreModels
import Foundation
import Logging
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The ledger a command works on, from `--database`: a `postgres://` URL (PostgreSQL, for several instances) or a
/// file path (SQLite, the default).
struct LedgerDatabase {
    let store: any LedgerStore
    /// What to log: the file, or the URL without its password.
    let description: String
    let migrationsApplied: [String]
    /// Whether the SQLite file was created by this open (``Access/serving`` only).
    let created: Bool
    /// Whether closing empties a SQLite ledger's write-ahead log: not for ``Access/existing``, whose commands may run
    /// beside a server (the checkpoint would hold its writer).
    var checkpointsOnClose = true
    private let closing: @Sendable () async -> Void
    private let closed = Once()

    /// Who opens the ledger.
    enum Access {
        /// `serve`: creates a SQLite ledger that does not exist (and says so), and holds the SQLite file's lock for the
        /// process's life: one server per SQLite ledger, whose answer cache assumes it is the file's only server.
        case serving
        /// `copy`: reads a SQLite ledger that must exist and no server may be running on.
        case exclusive(purpose: String)
        /// Every other command: the ledger must exist (a mistyped path is an error, not a new empty ledger); it may
        /// run beside a server, coordinating through the ledger's job leases.
        case existing
        /// A command that only reads (`events list`, `events show`): as ``existing``, and a SQLite ledger is opened
        /// read-only (nothing in it or its log changes; it need not be writable by this process).
        case reading
    }

    /// Opens `database`; a PostgreSQL store counts its batches and retries in `metrics`.
    static func open(_ database: String, access: Access, logger: Logger, metrics: StorekeeperMetrics = .discarded) async throws -> LedgerDatabase {
        if PostgresDatabaseURL.isPostgres(database) {
            let url = try Self.postgresURL(database, option: "--database")
            let store = try await PostgresLedgerStore.open(url, logger: logger, metrics: metrics)
            return LedgerDatabase(
                store: store, description: url.redacted, migrationsApplied: store.migrationsApplied, created: false, closing: {}
            )
        }
        try Self.requireSQLitePath(database, option: "--database", orPostgres: true)
        let exists = FileManager.default.fileExists(atPath: database)
        // A new ledger in a directory that exists: a missing directory is more likely a mistyped path than a
        // place for a new, empty ledger (and `backup`, `recover` and the others refuse it too).
        if case .serving = access, !exists {
            let directory = URL(fileURLWithPath: database).deletingLastPathComponent().path
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), !isDirectory.boolValue {
                throw CLIError(
                    code: "no-such-directory",
                    message:
                        "\(UntrustedText.quoted(directory, limit: 256)) is a file, not a directory, so it cannot hold a new SQLite ledger at \(UntrustedText.quoted(database, limit: 256)): check --database"
                )
            }
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw CLIError(
                    code: "no-such-directory",
                    message:
                        "no directory \(UntrustedText.quoted(directory, limit: 256)) for a new SQLite ledger at \(UntrustedText.quoted(database, limit: 256)): check --database, or create the directory first (mkdir -p)"
                )
            }
        }
        // Said in words before the lock file or SQLite meet the same problem.
        if case .reading = access {
            guard exists else { throw Self.missing(database) }
            // The store checks what reading needs (SQLiteLedgerStore.checkReadAccess) as it opens.
            let store = try SQLiteLedgerStore(readingOnly: database)
            var ledger = LedgerDatabase(store: store, description: database, migrationsApplied: [], created: false, closing: {})
            ledger.checkpointsOnClose = false
            return ledger
        }
        try SQLiteLedgerStore.checkAccess(database)
        let lock: ExclusiveLock?
        switch access {
        case .serving:
            lock = try Self.lock(database, purpose: "storekeeper serve")
        case .exclusive(let purpose):
            guard exists else { throw Self.missing(database) }
            lock = try Self.lock(database, purpose: purpose)
        case .existing, .reading:
            guard exists else { throw Self.missing(database) }
            lock = nil
        }
        if !exists {
            logger.notice("no SQLite ledger at this path: creating a new, empty one", metadata: ["database": .string(database)])
        }
        // A file that exists must already be a ledger (an empty file is a new ledger only for `serve`).
        var creating = false
        if case .serving = access { creating = true }
        let store = try SQLiteLedgerStore(path: database, creating: creating)
        // A ledger this open made: its file exists now, and is locked as an existing one is (by inode too).
        if !exists, let lock {
            do {
                lock.holding(try ExclusiveLock(sameFileAs: canonicalPath(database)))
            } catch {
                await store.close()
                lock.release()
                throw error
            }
        }
        var ledger = LedgerDatabase(
            store: store, description: database, migrationsApplied: store.migrationsApplied, created: !exists, closing: { lock?.release() }
        )
        if case .existing = access { ledger.checkpointsOnClose = false }
        return ledger
    }

    /// What an option that names a ledger takes.
    enum LedgerKind {
        case sqlite, sqliteOrPostgres, postgres

        var wanted: String {
            switch self {
            case .sqlite: "a SQLite file's path"
            case .sqliteOrPostgres: "a SQLite file's path or a postgres:// URL"
            case .postgres: "a postgres:// URL (postgres://user@host:5432/database)"
            }
        }
    }

    /// Refuses a value of `option` that cannot be a SQLite file's path: empty or blank, or a URL (another scheme's,
    /// or a PostgreSQL one where only SQLite will do), never repeating a URL, which may hold a password.
    static func requireSQLitePath(_ value: String, option: String, orPostgres: Bool = false) throws {
        try refuseMistypedURL(value, option: option, wanting: orPostgres ? .sqliteOrPostgres : .sqlite)
        if let scheme = value.range(of: "://").map({ value[..<$0.lowerBound] }), !scheme.contains("/") {
            throw CLIError(
                code: "invalid-option",
                message:
                    "\(option) is a \(UntrustedText.escaped(String(scheme), limit: 32)):// URL (not shown: it may hold a password): give \(orPostgres ? LedgerKind.sqliteOrPostgres.wanted : LedgerKind.sqlite.wanted)"
            )
        }
    }

    /// Refuses an empty value of `option`, and one that looks like a mistyped PostgreSQL URL (`postgres:/…`,
    /// `postgresql:host/…`, or `user:password@host` without its scheme: a file of that name would show the password in
    /// every log line naming it), saying what the option takes; the value is never shown.
    static func refuseMistypedURL(_ value: String, option: String, wanting kind: LedgerKind) throws {
        guard !value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw CLIError(code: "invalid-option", message: "\(option) is empty: give \(kind.wanted)")
        }
        let lowered = value.lowercased()
        let beforeAt = value.firstIndex(of: "@").map { value[..<$0] }
        let fix =
            switch kind {
            case .sqlite: "give a SQLite file's path"
            case .sqliteOrPostgres, .postgres: "write it postgres://user@host:5432/database"
            }
        if !value.contains("://"), lowered.hasPrefix("postgres:") || lowered.hasPrefix("postgresql:") {
            throw CLIError(
                code: "invalid-option", message: "\(option) looks like a mistyped PostgreSQL URL (not shown: it may hold a password): \(fix)")
        }
        if !value.contains("://"), let beforeAt, beforeAt.contains(":"), !beforeAt.contains("/") {
            throw CLIError(
                code: "invalid-option",
                message:
                    "\(option) looks like user:password@host, a PostgreSQL URL without its postgres:// (not shown: it may hold a password): "
                    + (kind == .postgres ? fix : "\(fix), or a file of that name as ./name"))
        }
    }

    /// `value` of `option` read as a PostgreSQL URL; a URL that cannot be used is a usage mistake (exit 64), named
    /// without its password.
    static func postgresURL(_ value: String, option: String) throws -> PostgresDatabaseURL {
        do {
            return try PostgresDatabaseURL(value)
        } catch {
            throw CLIError(code: "invalid-option", message: "\(option): \(error.message)")
        }
    }

    /// The error for a SQLite ledger that does not exist where a command that does not create one was pointed.
    private static func missing(_ database: String) -> CLIError {
        CLIError(
            code: "no-such-ledger",
            message:
                "no SQLite ledger at \(UntrustedText.quoted(database, limit: 256)): check --database (it is a file path or a postgres:// URL; only `storekeeper serve` creates a new ledger)"
        )
    }

    /// The lock of a SQLite ledger (`FILE.lock` beside it), or the error naming the server that holds it.
    static func lock(_ database: String, purpose: String) throws -> ExclusiveLock {
        do {
            // Beside the file itself, however it is named (a symbolic link, `..`, another relative path): one file, one lock.
            let named = try ExclusiveLock(path: canonicalPath(database) + ".lock", purpose: purpose)
            // And on the file itself, for a name `realpath` cannot see through (a hard link).
            if FileManager.default.fileExists(atPath: database) {
                do {
                    named.holding(try ExclusiveLock(sameFileAs: canonicalPath(database)))
                } catch {
                    named.release()
                    throw error
                }
            }
            return named
        } catch let held as ExclusiveLock.Held {
            throw CLIError(
                code: "ledger-in-use",
                message: "the SQLite ledger \(database) is in use by \(held.holder): one `storekeeper serve` per SQLite ledger (its answer cache "
                    + "assumes it is the file's only server); stop that one first, or use PostgreSQL for several instances"
            )
        }
    }

    /// The file's real path, symbolic links resolved (of its directory, when the file does not exist yet).
    static func canonicalPath(_ path: String) -> String {
        func real(_ path: String) -> String? {
            guard let resolved = realpath(path, nil) else { return nil }
            defer { free(resolved) }
            return String(cString: resolved)
        }
        if let file = real(path) { return file }
        let url = URL(fileURLWithPath: path)
        guard let directory = real(url.deletingLastPathComponent().path) else { return url.standardizedFileURL.path }
        return directory + "/" + url.lastPathComponent
    }

    /// Closes the database's connections (PostgreSQL) and gives back the SQLite file's lock; once, however often called.
    func close() async {
        guard closed.first() else { return }
        if !checkpointsOnClose, let sqlite = store as? SQLiteLedgerStore {
            await sqlite.close(checkpointing: false)
        } else {
            await store.close()
        }
        await closing()
    }

    /// Opens `database`, runs `body` with it, and closes it however `body` ends (what every command but `serve`, whose
    /// application owns its store, does).
    static func withOpened<T>(
        _ database: String, access: Access, logger: Logger, metrics: StorekeeperMetrics = .discarded, _ body: (LedgerDatabase) async throws -> T
    ) async throws -> T {
        let ledger = try await open(database, access: access, logger: logger, metrics: metrics)
        do {
            let result = try await body(ledger)
            await ledger.close()
            return result
        } catch {
            await ledger.close()
            throw error
        }
    }

    /// `--database`'s help.
    static let help =
        "SQLite database file, or a postgres:// URL; without a password in it, PGPASSWORD or the password file (PGPASSFILE, else ~/.pgpass) gives one (see Sources/StorekeeperServer/Documentation.docc/PostgreSQL.md)."
}

/// Says `true` the first time it is asked, `false` after.
final class Once: Sendable {
    private let done = Mutex(false)

    func first() -> Bool {
        done.withLock { done in
            defer { done = true }
            return !done
        }
    }
}
