/// A transaction's product `type`.
public struct ProductType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let autoRenewable: Self = "Auto-Renewable Subscription"
    public static let nonConsumable: Self = "Non-Consumable"
    public static let consumable: Self = "Consumable"
    public static let nonRenewing: Self = "Non-Renewing Subscription"

    public static let knownValues: [Self] = [.autoRenewable, .nonConsumable, .consumable, .nonRenewing]
}
