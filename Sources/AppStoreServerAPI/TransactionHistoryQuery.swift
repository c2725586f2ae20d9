package import AppStoreModels
package import Foundation

/// Filters for Get Transaction History (APPSTORE-SPEC §1.4); repeated values of one filter are OR-ed, different
/// filters AND-ed. Every page repeats them.
package struct TransactionHistoryQuery: Sendable, Hashable {
    package enum Sort: String, Sendable { case ascending = "ASCENDING", descending = "DESCENDING" }

    /// Transactions with `startDate <= purchaseDate < endDate`.
    package var startDate: Date?
    package var endDate: Date?
    package var productIds: [String] = []
    package var productTypes: [ProductType] = []
    package var sort: Sort?
    package var subscriptionGroupIdentifiers: [String] = []
    package var inAppOwnershipType: InAppOwnershipType?
    /// `true`: only revoked; `false`: only not revoked; `nil`: both.
    package var revoked: Bool?

    package init() {}

    static let productTypeNames: [ProductType: String] = [
        .autoRenewable: "AUTO_RENEWABLE", .nonRenewing: "NON_RENEWABLE", .consumable: "CONSUMABLE",
        .nonConsumable: "NON_CONSUMABLE",
    ]

    func validate() throws(AppStoreServerAPIError) {
        if let startDate, let endDate, startDate >= endDate {
            throw .invalid("startDate must come before endDate")
        }
        for type in productTypes where Self.productTypeNames[type] == nil {
            throw .invalid("productType '\(type)' is not one of the four product types")
        }
        for group in subscriptionGroupIdentifiers where group.isEmpty || !group.allSatisfy(\.isNumber) {
            throw .invalid("subscriptionGroupIdentifier '\(group)' is not a number")
        }
        for product in productIds where product.isEmpty {
            throw .invalid("productId is empty")
        }
    }

    var parameters: [(String, String)] {
        var query: [(String, String)] = []
        if let startDate { query.append(("startDate", String(startDate.epochMilliseconds))) }
        if let endDate { query.append(("endDate", String(endDate.epochMilliseconds))) }
        query += productIds.map { ("productId", $0) }
        query += productTypes.compactMap { Self.productTypeNames[$0].map { ("productType", $0) } }
        if let sort { query.append(("sort", sort.rawValue)) }
        query += subscriptionGroupIdentifiers.map { ("subscriptionGroupIdentifier", $0) }
        if let inAppOwnershipType { query.append(("inAppOwnershipType", inAppOwnershipType.rawValue)) }
        if let revoked { query.append(("revoked", revoked ? "true" : "false")) }
        return query
    }
}

extension AppStoreServerAPIError {
    /// A request refused before sending.
    static func invalid(_ message: String) -> AppStoreServerAPIError {
        AppStoreServerAPIError(kind: .invalidRequest, message: message)
    }
}
