public import AppStoreModels
public import AppStoreSigning

/// What one write changes: the records to insert or replace.
public struct LedgerChanges: Sendable {
    public var transactions: [LedgerTransaction] = []
    public var subscriptions: [LedgerSubscription] = []
    public var links: [LedgerKey: String] = [:]
    public var tokenOwners: [AppAccountTokenKey: String] = [:]
    /// The notifications received, to keep (every notification applied is kept once).
    public var notifications: [LedgerNotification] = []

    /// The records of `after` that differ from `before`.
    public init(from before: Ledger, to after: Ledger, notifications: [LedgerNotification] = []) {
        transactions = after.transactions.sorted { $0.key < $1.key }.filter { before.transactions[$0.key] != $0.value }.map(\.value)
        subscriptions = after.subscriptions.sorted { $0.key < $1.key }.filter { before.subscriptions[$0.key] != $0.value }.map(\.value)
        links = after.explicitLinks.filter { before.explicitLinks[$0.key] != $0.value }
        tokenOwners = after.tokenOwners.filter { before.tokenOwners[$0.key] != $0.value }
        self.notifications = notifications
    }

    public var isEmpty: Bool {
        transactions.isEmpty && subscriptions.isEmpty && links.isEmpty && tokenOwners.isEmpty && notifications.isEmpty
    }
}
