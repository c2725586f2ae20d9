public import AppStoreModels
public import Foundation

/// A ledger's contents in pages, for moving it to another backend (`storekeeper copy`, SQLite to PostgreSQL). Each
/// page is whole records; a notification keeps when it was received, and its raw payload when not pruned.
public struct LedgerPage: Sendable {
    public var transactions: [LedgerTransaction] = []
    public var subscriptions: [LedgerSubscription] = []
    public var links: [LedgerKey: String] = [:]
    public var tokenOwners: [AppAccountTokenKey: String] = [:]
    public var notifications: [KeptNotification] = []
    public var refused: [RefusedNotification] = []
    public var watermarks: [RecoveryWatermark] = []

    public init() {}

    /// Records in the page.
    public var count: Int {
        transactions.count + subscriptions.count + links.count + tokenOwners.count + notifications.count + refused.count + watermarks.count
    }
}

/// A notification as the ledger keeps it, with when it was received; `signedPayload` is `nil` once pruned.
public struct KeptNotification: Sendable, Hashable {
    public var notificationUUID: String
    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    public var outcome: String
    public var receivedAt: Date
    public var signedPayload: String?

    public init(
        notificationUUID: String, notificationType: NotificationType, subtype: NotificationSubtype?, signedDate: Date?,
        environment: AppStoreEnvironment?, outcome: String, receivedAt: Date, signedPayload: String?
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDate = signedDate
        self.environment = environment
        self.outcome = outcome
        self.receivedAt = receivedAt
        self.signedPayload = signedPayload
    }
}
