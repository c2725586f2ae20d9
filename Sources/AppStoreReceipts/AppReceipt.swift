public import Foundation

/// An app receipt's fields (StoreKit 1's `appStoreReceiptURL` file), as its signed payload holds them: the app-level
/// attributes and one ``InAppPurchase`` per in-app entry (type 17). Dates are the receipt's RFC 3339 strings read as
/// dates; a field the receipt leaves out is `nil`.
public struct AppReceipt: Sendable, Hashable, Codable {
    /// Field 0 (undocumented): `Production`, `ProductionSandbox` or `Xcode`.
    public var receiptType: String?
    /// Field 2.
    public var bundleId: String
    /// Field 3.
    public var applicationVersion: String?
    /// Field 19.
    public var originalApplicationVersion: String?
    /// Field 12: when the App Store (or Xcode) made the receipt; the default moment its signature is judged at.
    public var creationDate: Date?
    /// Field 21.
    public var expirationDate: Date?
    /// The in-app entries, in the receipt's order (empty when the app's customer never bought anything).
    public var inAppPurchases: [InAppPurchase]

    public init(
        receiptType: String? = nil, bundleId: String, applicationVersion: String? = nil, originalApplicationVersion: String? = nil,
        creationDate: Date? = nil, expirationDate: Date? = nil, inAppPurchases: [InAppPurchase] = []
    ) {
        self.receiptType = receiptType
        self.bundleId = bundleId
        self.applicationVersion = applicationVersion
        self.originalApplicationVersion = originalApplicationVersion
        self.creationDate = creationDate
        self.expirationDate = expirationDate
        self.inAppPurchases = inAppPurchases
    }

    /// The transaction ID to ask Get Transaction History with: the first entry's original transaction ID, else its
    /// transaction ID; `nil` when there is no entry (what Apple's `ReceiptUtility` extracts, from a receipt verified
    /// first).
    public var transactionIdForHistory: String? {
        guard let first = inAppPurchases.first else { return nil }
        return first.originalTransactionId ?? first.transactionId
    }
}

/// One in-app entry of an app receipt (field 17).
public struct InAppPurchase: Sendable, Hashable, Codable {
    /// 1701.
    public var quantity: Int?
    /// 1702.
    public var productId: String?
    /// 1703.
    public var transactionId: String?
    /// 1705.
    public var originalTransactionId: String?
    /// 1704.
    public var purchaseDate: Date?
    /// 1706.
    public var originalPurchaseDate: Date?
    /// 1708.
    public var expiresDate: Date?
    /// 1711.
    public var webOrderLineItemId: Int64?
    /// 1712.
    public var cancellationDate: Date?
    /// 1719.
    public var isInIntroOfferPeriod: Bool?

    public init() {}
}
