/// `expirationIntent`: why a subscription expired.
public struct ExpirationIntent: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let customerCancelled: Self = 1
    public static let billingError: Self = 2
    public static let didNotConsentToPriceIncrease: Self = 3
    public static let productUnavailable: Self = 4
    public static let other: Self = 5

    public static let knownValues: [Self] = [
        .customerCancelled, .billingError, .didNotConsentToPriceIncrease, .productUnavailable, .other,
    ]
}
