public import AppStoreModels
public import Foundation

/// A notification as received, kept for audit.
public struct LedgerNotification: Codable, Hashable, Sendable {
    public var notificationUUID: String
    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    /// What the ledger did with it: `applied`, `duplicate`, `recorded` (no purchase data).
    public var outcome: String
    public var signedPayload: String
}
