public import AppStoreModels
public import Foundation

/// Whose consumables, in which app and environment, of which product.
public struct ConsumableTotalKey: Codable, Hashable, Sendable {
    public var customerId: String
    public var environment: AppStoreEnvironment
    public var bundleId: String
    public var productId: String

    public init(customerId: String, environment: AppStoreEnvironment, bundleId: String, productId: String) {
        self.customerId = customerId
        self.environment = environment
        self.bundleId = bundleId
        self.productId = productId
    }
}

/// Consumable purchases counted without loading them.
public struct ConsumableTotal: Codable, Hashable, Sendable {
    /// Units bought and not refunded (each purchase's quantity, 1 when absent).
    public var units: Int
    /// Purchases counted, refunded ones included.
    public var purchases: Int

    public init(units: Int, purchases: Int) {
        self.units = units
        self.purchases = purchases
    }
}
