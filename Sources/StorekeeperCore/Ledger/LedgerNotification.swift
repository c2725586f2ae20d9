package import AppStoreModels
package import Foundation

/// A notification as received, kept for audit.
package struct LedgerNotification: Codable, Hashable, Sendable {
    package var notificationUUID: String
    package var notificationType: NotificationType
    package var subtype: NotificationSubtype?
    package var signedDate: Date?
    package var environment: AppStoreEnvironment?
    /// What the ledger did with it: ``ApplyOutcome/applied``, or ``ApplyOutcome/recorded`` (no purchase data).
    package var outcome: ApplyOutcome
    package var signedPayload: String
}
