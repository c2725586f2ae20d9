public import AppStoreModels
public import AppStoreSigning
public import Foundation

/// How far the notification recovery of one app in one environment has got: every notification the App Store
/// created before ``date`` has been fetched and is in the ledger (or was refused, and kept for audit).
public struct RecoveryWatermark: Hashable, Sendable {
    public var app: VerifierKey
    public var date: Date

    public init(app: VerifierKey, date: Date) {
        self.app = app
        self.date = date
    }
}
