/// `tokenType` of an External Purchase token (custom-link tokens only).
public struct ExternalPurchaseTokenType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let acquisition: Self = "ACQUISITION"
    public static let services: Self = "SERVICES"

    public static let knownValues: [Self] = [.acquisition, .services]
}
