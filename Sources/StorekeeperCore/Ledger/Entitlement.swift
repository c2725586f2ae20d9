package import AppStoreModels
package import Foundation

/// One thing a customer is entitled to now, and why (DESIGN rule 7).
package struct Entitlement: Codable, Hashable, Sendable {
    package var entitlement: String
    package var productId: String
    package var productType: ProductType
    package var ownership: InAppOwnershipType
    package var expiresDate: Date?
    package var willRenew: Bool?
    package var inGracePeriod: Bool
    package var inBillingRetry: Bool
    /// The transaction that grants it, and what delivered that transaction (a notification UUID or `app`).
    package var transactionId: String
    package var originalTransactionId: String
    package var source: String
}
