import Foundation
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite

/// A ledger backend a test runs against: SQLite always, PostgreSQL when `STOREKEEPER_TEST_POSTGRES_URL` is set.
package enum Backend: String, CaseIterable, Sendable {
    case sqlite
    case postgres

    /// The backends these tests can reach.
    package static var available: [Backend] { PostgresTestDatabase.isConfigured ? [.sqlite, .postgres] : [.sqlite] }

    /// A new, empty store: a temporary SQLite file, or a new database on the test server.
    package func makeStore(unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil) async throws -> any LedgerInspection {
        switch self {
        case .sqlite:
            let path = TestFiles.directory.appendingPathComponent("ledger-\(UUID()).sqlite").path
            return try SQLiteLedgerStore(path: path, unsafeFaultInjection: unsafeFaultInjection)
        case .postgres:
            return try await PostgresTestDatabase.openStore(unsafeFaultInjection: unsafeFaultInjection)
        }
    }
}
