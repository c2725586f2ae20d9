public import Foundation

/// A decoded signed renewal info: Apple's `JWSRenewalInfoDecodedPayload` (APPSTORE-SPEC §3.3).
public struct RenewalInfo: Codable, Hashable, Sendable {
    public var originalTransactionId: String
    /// The product currently subscribed.
    public var productId: String?
    /// The product that renews next; differs from `productId` after a downgrade or crossgrade is scheduled.
    public var autoRenewProductId: String?
    public var autoRenewStatus: AutoRenewStatus?
    public var expirationIntent: ExpirationIntent?
    /// True while Apple still tries to renew (also throughout Billing Grace Period).
    public var isInBillingRetryPeriod: Bool?
    public var priceIncreaseStatus: PriceIncreaseStatus?
    /// Present while in Billing Grace Period.
    public var gracePeriodExpiresDate: Date?
    /// The offer that applies to the next renewal period.
    public var offerType: OfferType?
    public var offerIdentifier: String?
    public var offerDiscountType: OfferDiscountType?
    public var offerPeriod: String?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    /// Start of the latest run of continuous service.
    public var recentSubscriptionStartDate: Date?
    /// When the most recent subscription purchase expires: the next renewal.
    public var renewalDate: Date?
    public var currency: String?
    /// Price of the next renewal in milliunits, with any offer discount.
    public var renewalPrice: Int64?
    /// Win-back offers the customer is eligible for, best first.
    public var eligibleWinBackOfferIds: [String]?
    public var appAccountToken: LowercaseUUID?
    public var appTransactionId: String?
    /// Advanced Commerce only; passed through uninterpreted.
    public var advancedCommerceInfo: JSONValue?
    public var commitmentInfo: RenewalCommitmentInfo?
    public var renewalBillingPlanType: BillingPlanType?

    /// A renewal info with its required field; everything else starts empty.
    public init(originalTransactionId: String) {
        self.originalTransactionId = originalTransactionId
    }
}

/// `commitmentInfo` of a renewal info (API 1.21).
public struct RenewalCommitmentInfo: Codable, Hashable, Sendable {
    public var commitmentAutoRenewProductId: String?
    public var commitmentAutoRenewStatus: AutoRenewStatus?
    public var commitmentRenewalBillingPlanType: BillingPlanType?
    public var commitmentRenewalDate: Date?
    public var commitmentRenewalPrice: Int64?

    public init(
        commitmentAutoRenewProductId: String? = nil,
        commitmentAutoRenewStatus: AutoRenewStatus? = nil,
        commitmentRenewalBillingPlanType: BillingPlanType? = nil,
        commitmentRenewalDate: Date? = nil,
        commitmentRenewalPrice: Int64? = nil
    ) {
        self.commitmentAutoRenewProductId = commitmentAutoRenewProductId
        self.commitmentAutoRenewStatus = commitmentAutoRenewStatus
        self.commitmentRenewalBillingPlanType = commitmentRenewalBillingPlanType
        self.commitmentRenewalDate = commitmentRenewalDate
        self.commitmentRenewalPrice = commitmentRenewalPrice
    }
}
