import AppStoreModels
import AppStoreSigning
package import Foundation

/// How far the notification recovery of one app in one environment has got: every notification the App Store
/// created before ``date`` has been fetched and is in the ledger (or was refused, and kept for audit).
package struct RecoveryWatermark: Hashable, Sendable {
    package var app: VerifierKey
    package var date: Date

    package init(app: VerifierKey, date: Date) {
        self.app = app
        self.date = date
    }
}
