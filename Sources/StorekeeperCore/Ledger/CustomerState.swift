package import AppStoreModels
import Foundation

/// A customer's state: entitlements, subscriptions, non-consumables and consumable balances.
package struct CustomerState: Codable, Hashable, Sendable {
    package var customerId: String
    package var environment: AppStoreEnvironment
    package var entitlements: [Entitlement]
    /// Product IDs the customer is entitled to (one per subscription group, the highest level), sorted.
    package var entitledProductIds: [String]
    /// Units of each consumable bought and not refunded.
    package var consumableBalance: [String: Int]
}
