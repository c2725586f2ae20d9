public import AppStoreModels
public import Foundation

/// One thing a customer is entitled to now, and why (DESIGN rule 7).
public struct Entitlement: Codable, Hashable, Sendable {
    public var entitlement: String
    public var productId: String
    public var productType: ProductType
    public var ownership: InAppOwnershipType
    public var expiresDate: Date?
    public var willRenew: Bool?
    public var inGracePeriod: Bool
    public var inBillingRetry: Bool
    /// The transaction that grants it, and what delivered that transaction (a notification UUID or `app`).
    public var transactionId: String
    public var originalTransactionId: String
    public var source: String
}
