public import AppStoreModels
public import Foundation

/// A customer's state: entitlements, subscriptions, non-consumables and consumable balances.
public struct CustomerState: Codable, Hashable, Sendable {
    public var customerId: String
    public var environment: AppStoreEnvironment
    public var entitlements: [Entitlement]
    /// Product IDs the customer is entitled to (one per subscription group, the highest level), sorted.
    public var entitledProductIds: [String]
    /// Units of each consumable bought and not refunded.
    public var consumableBalance: [String: Int]
}
