/// `data.consumptionRequestReason` of a `CONSUMPTION_REQUEST` notification.
public struct ConsumptionRequestReason: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let unintendedPurchase: Self = "UNINTENDED_PURCHASE"
    public static let fulfillmentIssue: Self = "FULFILLMENT_ISSUE"
    public static let unsatisfiedWithPurchase: Self = "UNSATISFIED_WITH_PURCHASE"
    public static let legal: Self = "LEGAL"
    public static let other: Self = "OTHER"

    public static let knownValues: [Self] = [
        .unintendedPurchase, .fulfillmentIssue, .unsatisfiedWithPurchase, .legal, .other,
    ]
}
