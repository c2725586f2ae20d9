/// `autoRenewStatus` of a renewal info.
public struct AutoRenewStatus: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let off: Self = 0
    public static let on: Self = 1

    public static let knownValues: [Self] = [.off, .on]
}
