/// `revocationReason`: why the App Store refunded or revoked a transaction.
public struct RevocationReason: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Another reason, for example an accidental purchase (also a family member whose access ended).
    public static let other: Self = 0
    /// A real or perceived issue in the app.
    public static let appIssue: Self = 1

    public static let knownValues: [Self] = [.other, .appIssue]
}
