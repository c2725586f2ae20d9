import AppStoreModels
import AppStoreSigning

/// What one write changes: the records to insert or replace.
package struct LedgerChanges: Sendable {
    package var transactions: [LedgerTransaction] = []
    package var subscriptions: [LedgerSubscription] = []
    package var links: [LedgerKey: String] = [:]
    package var tokenOwners: [AppAccountTokenKey: String] = [:]
    /// The notifications received, to keep (every notification applied is kept once).
    package var notifications: [LedgerNotification] = []
    /// Promotional grants new or changed (revoked).
    package var grants: [PromotionalGrant] = []

    /// The records of `after` that differ from `before`.
    package init(from before: Ledger, to after: Ledger, notifications: [LedgerNotification] = []) {
        transactions = after.transactions.sorted { $0.key < $1.key }.filter { before.transactions[$0.key] != $0.value }.map(\.value)
        subscriptions = after.subscriptions.sorted { $0.key < $1.key }.filter { before.subscriptions[$0.key] != $0.value }.map(\.value)
        links = after.explicitLinks.filter { before.explicitLinks[$0.key] != $0.value }
        tokenOwners = after.tokenOwners.filter { before.tokenOwners[$0.key] != $0.value }
        self.notifications = notifications
        grants = after.grants.sorted { $0.key < $1.key }.filter { before.grants[$0.key] != $0.value }.map(\.value)
    }

    package var isEmpty: Bool {
        transactions.isEmpty && subscriptions.isEmpty && links.isEmpty && tokenOwners.isEmpty && notifications.isEmpty && grants.isEmpty
    }
}
