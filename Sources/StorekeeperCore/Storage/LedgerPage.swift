package import AppStoreModels
package import Foundation

/// A ledger's contents in pages, for moving it to another backend (`storekeeper copy`, SQLite to PostgreSQL). Each
/// page is whole records; a notification keeps when it was received, and its raw payload when not pruned.
package struct LedgerPage: Sendable {
    package var transactions: [LedgerTransaction] = []
    package var subscriptions: [LedgerSubscription] = []
    package var links: [LedgerKey: String] = [:]
    package var tokenOwners: [AppAccountTokenKey: String] = [:]
    package var notifications: [KeptNotification] = []
    package var refused: [RefusedNotification] = []
    package var watermarks: [RecoveryWatermark] = []
    package var issuedTokens: [IssuedToken] = []

    package init() {}

    /// Records in the page.
    package var count: Int {
        transactions.count + subscriptions.count + links.count + tokenOwners.count + notifications.count + refused.count + watermarks.count
            + issuedTokens.count
    }
}

/// A notification as the ledger keeps it, with when it was received; `signedPayload` is `nil` once pruned.
package struct KeptNotification: Sendable, Hashable {
    package var notificationUUID: String
    package var notificationType: NotificationType
    package var subtype: NotificationSubtype?
    package var signedDate: Date?
    package var environment: AppStoreEnvironment?
    package var outcome: ApplyOutcome
    package var receivedAt: Date
    package var signedPayload: String?

    package init(
        notificationUUID: String, notificationType: NotificationType, subtype: NotificationSubtype?, signedDate: Date?,
        environment: AppStoreEnvironment?, outcome: ApplyOutcome, receivedAt: Date, signedPayload: String?
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
