/// Status of an auto-renewable subscription: notification `data.status` and the API's
/// `lastTransactionsItem.status` (APPSTORE-SPEC §2.2).
public struct SubscriptionStatus: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let active: Self = 1
    public static let expired: Self = 2
    public static let billingRetry: Self = 3
    public static let billingGracePeriod: Self = 4
    public static let revoked: Self = 5

    public static let knownValues: [Self] = [.active, .expired, .billingRetry, .billingGracePeriod, .revoked]
}
