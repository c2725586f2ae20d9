import AppStoreModels
import AppStoreSigning

/// The row operations of a backend whose write transaction is synchronous (SQLite).
package protocol LedgerWriteTransaction {
    /// Answers one step's reads (by default through the three look-ups below).
    func read(_ reads: LedgerReads) throws -> LedgerReadResults
    /// Whether the ledger holds a notification with this UUID.
    func notificationExists(_ uuid: String) throws -> Bool
    /// Every transaction of one original transaction ID, its customer link and its subscription record, into `ledger`.
    func loadFamily(_ key: LedgerKey, into ledger: inout Ledger) throws
    /// The owners of `tokens` that have one.
    func tokenOwners(of tokens: Set<AppAccountTokenKey>) throws -> [AppAccountTokenKey: String]
    /// Which of `tokens` a customer's erasure retired.
    func erasedTokens(among tokens: Set<AppAccountTokenKey>) throws -> Set<AppAccountTokenKey>
    /// Writes what changed (and the notification received, if any).
    func write(_ changes: LedgerChanges) throws
    /// Moves an app's notification-recovery watermark.
    func setRecoveryWatermark(_ watermark: RecoveryWatermark) throws
    /// Reads customers' ledgers (every purchase of theirs in the key's environment) and their outbox states, with the
    /// outbox's settings; a backend with concurrent writers locks the states (creating them when missing), in order.
    func readCustomers(_ reads: OutboxReads) throws -> OutboxReadResults
    /// Appends events (giving each its ID and its position in commit order) and records customers' states.
    func appendEvents(_ append: OutboxAppend) throws
    /// Whether writes append events (``OutboxSettings/isEnabled``); `true` unless a store says otherwise.
    var outboxEnabled: Bool { get }
}

extension LedgerWriteTransaction {
    package var outboxEnabled: Bool { true }

    package func read(_ reads: LedgerReads) throws -> LedgerReadResults {
        var results = LedgerReadResults()
        for uuid in reads.claimNotifications {
            if try notificationExists(uuid) { results.existingNotifications.insert(uuid) }
        }
        if !reads.claimNotifications.isEmpty, results.existingNotifications.count == reads.claimNotifications.count { return results }
        for family in reads.families { try loadFamily(family, into: &results.ledger) }
        if !reads.tokens.isEmpty { results.tokenOwners = try tokenOwners(of: reads.tokens) }
        let unowned = reads.tokens.subtracting(results.tokenOwners.keys)
        if reads.erasedTokens, !unowned.isEmpty { results.erasedTokens = try erasedTokens(among: unowned) }
        return results
    }
}
