/// `priceIncreaseStatus` of a renewal info.
public struct PriceIncreaseStatus: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The customer hasn't responded to a price increase that needs consent.
    public static let pending: Self = 0
    /// The customer consented, or was notified of an increase that needs no consent.
    public static let accepted: Self = 1

    public static let knownValues: [Self] = [.pending, .accepted]
}
