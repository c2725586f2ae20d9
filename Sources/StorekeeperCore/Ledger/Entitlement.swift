package import AppStoreModels
package import Foundation

/// One thing a customer is entitled to now, and why (DESIGN rule 7): a purchase (its product, transaction and what
/// delivered it), or a promotional grant (``grantId``, `source` `promotional`, and no product, ownership or
/// transaction: its JSON leaves them out, so it is never taken for a purchase).
package struct Entitlement: Codable, Hashable, Sendable {
    package var entitlement: String
    package var productId: String
    package var productType: ProductType
    package var ownership: InAppOwnershipType
    package var expiresDate: Date?
    package var willRenew: Bool?
    package var inGracePeriod: Bool
    package var inBillingRetry: Bool
    /// The transaction that grants it, and what delivered that transaction (a notification UUID or `app`);
    /// ``PromotionalGrant/source`` for a grant.
    package var transactionId: String
    package var originalTransactionId: String
    package var source: String
    /// The promotional grant that gives it (`nil` for a purchase).
    package var grantId: String?

    package init(
        entitlement: String, productId: String, productType: ProductType, ownership: InAppOwnershipType, expiresDate: Date?, willRenew: Bool?,
        inGracePeriod: Bool, inBillingRetry: Bool, transactionId: String, originalTransactionId: String, source: String
    ) {
        self.entitlement = entitlement
        self.productId = productId
        self.productType = productType
        self.ownership = ownership
        self.expiresDate = expiresDate
        self.willRenew = willRenew
        self.inGracePeriod = inGracePeriod
        self.inBillingRetry = inBillingRetry
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.source = source
    }

    /// The entitlement a promotional grant gives.
    package init(grant: PromotionalGrant) {
        self.init(
            entitlement: grant.entitlement, productId: "", productType: ProductType(rawValue: ""), ownership: InAppOwnershipType(rawValue: ""),
            expiresDate: grant.expiresDate, willRenew: nil, inGracePeriod: false, inBillingRetry: false, transactionId: "",
            originalTransactionId: "", source: PromotionalGrant.source)
        grantId = grant.id
    }

    /// Whether a promotional grant gives it.
    package var isPromotional: Bool { grantId != nil }

    private enum CodingKeys: String, CodingKey {
        case entitlement, productId, productType, ownership, expiresDate, willRenew, inGracePeriod, inBillingRetry, transactionId
        case originalTransactionId, source, grantId
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        entitlement = try container.decode(String.self, forKey: .entitlement)
        grantId = try container.decodeIfPresent(String.self, forKey: .grantId)
        // A grant's has no product, ownership or transaction.
        let purchase = grantId == nil
        func text(_ key: CodingKeys) throws -> String {
            purchase ? try container.decode(String.self, forKey: key) : try container.decodeIfPresent(String.self, forKey: key) ?? ""
        }
        productId = try text(.productId)
        productType = ProductType(rawValue: try text(.productType))
        ownership = InAppOwnershipType(rawValue: try text(.ownership))
        transactionId = try text(.transactionId)
        originalTransactionId = try text(.originalTransactionId)
        expiresDate = try container.decodeIfPresent(Date.self, forKey: .expiresDate)
        willRenew = try container.decodeIfPresent(Bool.self, forKey: .willRenew)
        inGracePeriod = try container.decode(Bool.self, forKey: .inGracePeriod)
        inBillingRetry = try container.decode(Bool.self, forKey: .inBillingRetry)
        source = try container.decode(String.self, forKey: .source)
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entitlement, forKey: .entitlement)
        try container.encodeIfPresent(expiresDate, forKey: .expiresDate)
        try container.encodeIfPresent(grantId, forKey: .grantId)
        try container.encode(inBillingRetry, forKey: .inBillingRetry)
        try container.encode(inGracePeriod, forKey: .inGracePeriod)
        if grantId == nil {
            try container.encode(originalTransactionId, forKey: .originalTransactionId)
            try container.encode(ownership.rawValue, forKey: .ownership)
            try container.encode(productId, forKey: .productId)
            try container.encode(productType.rawValue, forKey: .productType)
        }
        try container.encode(source, forKey: .source)
        if grantId == nil { try container.encode(transactionId, forKey: .transactionId) }
        try container.encodeIfPresent(willRenew, forKey: .willRenew)
    }
}
