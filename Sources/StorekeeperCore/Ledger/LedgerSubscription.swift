public import AppStoreModels
public import Foundation

/// An auto-renewable subscription: the newest status and renewal info seen, each versioned by its own signed date.
public struct LedgerSubscription: Codable, Hashable, Sendable {
    public var key: LedgerKey
    public var bundleId: String
    /// `data.status` of the newest notification about it (1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked).
    public var status: SubscriptionStatus?
    public var statusSignedDate: Date?
    public var statusNotificationUUID: String?
    public var renewalInfo: RenewalInfo?
    public var renewalSignedDate: Date?
    public var renewalJWS: String?

    public init(key: LedgerKey, bundleId: String) {
        self.key = key
        self.bundleId = bundleId
    }
}
