package import AppStoreModels
import Foundation

/// Whose consumables, in which app and environment, of which product.
package struct ConsumableTotalKey: Codable, Hashable, Sendable {
    package var customerId: String
    package var environment: AppStoreEnvironment
    package var bundleId: String
    package var productId: String

    package init(customerId: String, environment: AppStoreEnvironment, bundleId: String, productId: String) {
        self.customerId = customerId
        self.environment = environment
        self.bundleId = bundleId
        self.productId = productId
    }
}

/// Consumable purchases counted without loading them.
package struct ConsumableTotal: Codable, Hashable, Sendable {
    /// Units bought and not refunded (each purchase's quantity, 1 when absent).
    package var units: Int
    /// Purchases counted, refunded ones included.
    package var purchases: Int

    package init(units: Int, purchases: Int) {
        self.units = units
        self.purchases = purchases
    }
}
