/// `transactionReason`: who started a transaction.
public struct TransactionReason: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Customer-initiated, including upgrades.
    public static let purchase: Self = "PURCHASE"
    /// System-initiated renewal, including a downgrade taking effect.
    public static let renewal: Self = "RENEWAL"

    public static let knownValues: [Self] = [.purchase, .renewal]
}
