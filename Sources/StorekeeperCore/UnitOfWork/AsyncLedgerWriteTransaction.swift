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
}
