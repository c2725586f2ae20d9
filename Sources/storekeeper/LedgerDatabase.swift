import Foundation
import Logging
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite

/// The ledger a command works on, from `--database`: a `postgres://` URL (PostgreSQL, for several instances) or a
/// file path (SQLite, the default).
struct LedgerDatabase {
    let store: any LedgerStore
    /// What to log: the file, or the URL without its password.
    let description: String
    let migrationsApplied: [String]
    private let closing: @Sendable () async -> Void

    /// Opens `database`; a PostgreSQL store counts its batches and retries in `metrics`.
    static func open(_ database: String, logger: Logger, metrics: StorekeeperMetrics = .discarded) async throws(StorageError) -> LedgerDatabase {
        if PostgresDatabaseURL.isPostgres(database) {
            let url = try PostgresDatabaseURL(database)
            let store = try await PostgresLedgerStore.open(url, logger: logger, metrics: metrics)
            return LedgerDatabase(store: store, description: url.redacted, migrationsApplied: store.migrationsApplied, closing: { await store.close() })
        }
        let store = try SQLiteLedgerStore(path: database)
        return LedgerDatabase(store: store, description: database, migrationsApplied: store.migrationsApplied, closing: {})
    }

    /// Closes the database's connections (PostgreSQL); nothing to do for SQLite.
    func close() async {
        await closing()
    }

    /// `--database`'s help.
    static let help = "SQLite database file (created, and migrated, at start), or a postgres:// URL; without a password in it, PGPASSWORD or the password file (PGPASSFILE, else ~/.pgpass) gives one (see README: PostgreSQL)."
}
