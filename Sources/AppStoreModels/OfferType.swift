/// `offerType` of a transaction or renewal info.
public struct OfferType: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let introductory: Self = 1
    public static let promotional: Self = 2
    public static let offerCode: Self = 3
    public static let winBack: Self = 4

    public static let knownValues: [Self] = [.introductory, .promotional, .offerCode, .winBack]
}
