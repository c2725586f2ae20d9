/// `offerDiscountType`: how an offer is paid.
public struct OfferDiscountType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let freeTrial: Self = "FREE_TRIAL"
    public static let payAsYouGo: Self = "PAY_AS_YOU_GO"
    public static let payUpFront: Self = "PAY_UP_FRONT"
    /// Offer codes for one-time products (API 1.18).
    public static let oneTime: Self = "ONE_TIME"

    public static let knownValues: [Self] = [.freeTrial, .payAsYouGo, .payUpFront, .oneTime]
}
