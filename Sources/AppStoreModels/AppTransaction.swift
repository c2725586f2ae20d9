public import Foundation

/// A decoded signed app transaction: Apple's `JWSAppTransactionDecodedPayload` (APPSTORE-SPEC §3.4).
public struct AppTransaction: Codable, Hashable, Sendable {
    /// The environment that signed it.
    public var receiptType: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String
    public var applicationVersion: String?
    public var versionExternalIdentifier: Int64?
    /// When the App Store signed it; certificate validity is judged at this date by default.
    public var receiptCreationDate: Date?
    public var originalPurchaseDate: Date?
    public var originalApplicationVersion: String?
    /// Base64.
    public var deviceVerification: String?
    public var deviceVerificationNonce: LowercaseUUID?
    /// Only for pre-orders.
    public var preorderDate: Date?
    public var appTransactionId: String?
    public var originalPlatform: PurchasePlatform?

    /// An app transaction with its required field; everything else starts empty.
    public init(bundleId: String) {
        self.bundleId = bundleId
    }
}
