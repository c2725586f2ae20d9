package import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite

/// What only tests ask of a ledger store, beside what the server asks of it (``LedgerStore``).
package protocol LedgerInspection: LedgerStore {
    /// The raw signed payload of a notification kept in the ledger, byte for byte as it was received, or `nil` when
    /// there is no such notification or its payload was pruned (``LedgerStore/pruneRawPayloads(receivedBefore:)``).
    func rawPayload(notificationUUID: String) async throws(StorageError) -> String?

    /// How many notifications are kept, by outcome (`rejected` counts the refused requests kept).
    func notificationCounts() async throws(StorageError) -> [String: Int]
}

extension SQLiteLedgerStore: LedgerInspection {}
extension PostgresLedgerStore: LedgerInspection {}
