import AppStoreModels
import AppStoreSigning

/// The row operations of a backend whose write transaction is asynchronous (PostgreSQL).
package protocol AsyncLedgerWriteTransaction {
    /// Answers one step's reads, claiming the notifications and locking the families and tokens asked for.
    func read(_ reads: LedgerReads) async throws -> LedgerReadResults
    /// Writes what changed (and the notification received, if any).
    func write(_ changes: LedgerChanges) async throws
    /// Moves an app's notification-recovery watermark.
    func setRecoveryWatermark(_ watermark: RecoveryWatermark) async throws
    /// Reads customers' ledgers (every purchase of theirs in the key's environment) and their outbox states, with the
    /// outbox's settings; a backend with concurrent writers locks the states (creating them when missing), in order.
    func readCustomers(_ reads: OutboxReads) async throws -> OutboxReadResults
    /// Appends events (giving each its ID and its position in commit order) and records customers' states.
    func appendEvents(_ append: OutboxAppend) async throws
    /// Whether writes append events (``OutboxSettings/isEnabled``); `true` unless a store says otherwise.
    var outboxEnabled: Bool { get }
}

extension AsyncLedgerWriteTransaction {
    package var outboxEnabled: Bool { true }
}
