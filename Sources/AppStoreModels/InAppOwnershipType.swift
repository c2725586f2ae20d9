/// How the customer has access to a purchase (`inAppOwnershipType`).
public struct InAppOwnershipType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let purchased: Self = "PURCHASED"
    public static let familyShared: Self = "FAMILY_SHARED"
    /// Access through an organization or group (API 1.22).
    public static let assigned: Self = "ASSIGNED"

    public static let knownValues: [Self] = [.purchased, .familyShared, .assigned]
}
