package import AppStoreModels
package import Foundation

/// An auto-renewable subscription: the newest status and renewal info seen, each versioned by its own signed date.
package struct LedgerSubscription: Codable, Hashable, Sendable {
    package var key: LedgerKey
    package var bundleId: String
    /// `data.status` of the newest notification about it (1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked).
    package var status: SubscriptionStatus?
    package var statusSignedDate: Date?
    package var statusNotificationUUID: String?
    package var renewalInfo: RenewalInfo?
    package var renewalSignedDate: Date?
    package var renewalJWS: String?

    package init(key: LedgerKey, bundleId: String) {
        self.key = key
        self.bundleId = bundleId
    }
}
