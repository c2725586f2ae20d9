/// `billingPlanType` / `renewalBillingPlanType` (API 1.21).
public struct BillingPlanType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let billedUpfront: Self = "BILLED_UPFRONT"
    /// Monthly billing with a 12-month commitment.
    public static let monthly: Self = "MONTHLY"

    public static let knownValues: [Self] = [.billedUpfront, .monthly]
}
