package import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite

/// What only tests ask of a ledger store, beside what the server asks of it (``LedgerStore``).
package protocol LedgerInspection: LedgerStore {
    /// How many notifications are kept, by outcome (`rejected` counts the refused requests kept).
    func notificationCounts() async throws(StorageError) -> [String: Int]
}

extension SQLiteLedgerStore: LedgerInspection {}
extension PostgresLedgerStore: LedgerInspection {}
