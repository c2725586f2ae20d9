public import Foundation

/// A decoded signed transaction: Apple's `JWSTransactionDecodedPayload` (APPSTORE-SPEC §3.2).
///
/// Prices are integer milliunits of `currency` (USD 1.99 → 1990). Dates come from epoch milliseconds.
public struct TransactionInfo: Codable, Hashable, Sendable {
    /// Unique per purchase, renewal or restore.
    public var transactionId: String
    /// The first purchase's transaction ID; constant across renewals.
    public var originalTransactionId: String
    /// The subscription purchase event ID, including renewals (subscriptions only).
    public var webOrderLineItemId: String?
    public var bundleId: String
    public var productId: String
    /// Subscriptions only.
    public var subscriptionGroupIdentifier: String?
    /// When the App Store charged the customer.
    public var purchaseDate: Date
    public var originalPurchaseDate: Date?
    /// Auto-renewable subscriptions: when it expires or renews.
    public var expiresDate: Date?
    public var quantity: Int?
    public var type: ProductType
    /// The UUID the app passed at purchase, if any.
    public var appAccountToken: LowercaseUUID?
    public var inAppOwnershipType: InAppOwnershipType?
    public var signedDate: Date?
    public var revocationReason: RevocationReason?
    public var revocationDate: Date?
    public var revocationType: RevocationType?
    /// Refunded share in milliunits (0-100000).
    public var revocationPercentage: Int?
    /// Present (and true) only when this transaction was upgraded to a higher level.
    public var isUpgraded: Bool?
    public var offerType: OfferType?
    public var offerIdentifier: String?
    public var offerDiscountType: OfferDiscountType?
    /// ISO 8601 duration of the offer, e.g. `P1M`.
    public var offerPeriod: String?
    public var environment: AppStoreEnvironment?
    /// ISO 3166-1 alpha-3 storefront code, e.g. `USA`.
    public var storefront: String?
    public var storefrontId: String?
    public var transactionReason: TransactionReason?
    /// Price in milliunits after any offer discount, times quantity.
    public var price: Int64?
    /// ISO 4217 currency of `price`.
    public var currency: String?
    public var appTransactionId: String?
    public var previousOriginalTransactionId: String?
    /// Advanced Commerce SKUs only; passed through uninterpreted.
    public var advancedCommerceInfo: JSONValue?
    public var billingPlanType: BillingPlanType?
    public var commitmentInfo: TransactionCommitmentInfo?
    /// Present in older transactions.
    public var deviceVerification: String?
    /// Present in older transactions.
    public var deviceVerificationNonce: LowercaseUUID?

    /// A transaction with its required fields; everything else starts empty.
    public init(
        transactionId: String,
        originalTransactionId: String,
        bundleId: String,
        productId: String,
        purchaseDate: Date,
        type: ProductType
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.bundleId = bundleId
        self.productId = productId
        self.purchaseDate = purchaseDate
        self.type = type
    }
}

/// `commitmentInfo` of a transaction (API 1.21).
public struct TransactionCommitmentInfo: Codable, Hashable, Sendable {
    public var billingPeriodNumber: Int?
    public var commitmentExpiresDate: Date?
    public var commitmentPrice: Int64?
    public var totalBillingPeriods: Int?

    public init(
        billingPeriodNumber: Int? = nil,
        commitmentExpiresDate: Date? = nil,
        commitmentPrice: Int64? = nil,
        totalBillingPeriods: Int? = nil
    ) {
        self.billingPeriodNumber = billingPeriodNumber
        self.commitmentExpiresDate = commitmentExpiresDate
        self.commitmentPrice = commitmentPrice
        self.totalBillingPeriods = totalBillingPeriods
    }
}
