/// `originalPlatform` of an app transaction.
public struct PurchasePlatform: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let iOS: Self = "iOS"
    public static let macOS: Self = "macOS"
    public static let tvOS: Self = "tvOS"
    public static let visionOS: Self = "visionOS"

    public static let knownValues: [Self] = [.iOS, .macOS, .tvOS, .visionOS]
}
