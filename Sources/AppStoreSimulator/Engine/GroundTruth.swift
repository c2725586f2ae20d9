package import AppStoreModels
package import Foundation

/// What a customer should be entitled to now, by the App Store's own state: the answer Storekeeper must match.
///
/// Follows StoreKit 2's `currentEntitlements`: auto-renewables that are active or in Billing Grace Period (the
/// highest level per group, purchased or family-shared), non-consumables not revoked, non-renewing subscriptions
/// within their period; consumables as a balance of units bought and not refunded.
package struct CustomerTruth: Codable, Hashable, Sendable {
    package struct Entitlement: Codable, Hashable, Sendable {
        package var productId: String
        package var type: ProductType
        package var ownership: InAppOwnershipType
        package var transactionId: String
        package var originalTransactionId: String
        /// Subscriptions: when the current period ends.
        package var expiresDate: Date?
        /// Auto-renewables: 1 active or 4 in Billing Grace Period.
        package var status: SubscriptionStatus?
        package var willAutoRenew: Bool?
    }

    package var customerId: String
    package var entitlements: [Entitlement]
    /// Units of each consumable bought and not refunded.
    package var consumableBalance: [String: Int]
}

extension LifecycleEngine {
    /// The ground truth for every customer, sorted by customer ID.
    package func groundTruth() -> [CustomerTruth] {
        state.customers.keys.sorted().compactMap { try? groundTruth(customerId: $0) }
    }

    /// The ground truth for one customer.
    package func groundTruth(customerId: String) throws(SimulatorError) -> CustomerTruth {
        _ = try customer(customerId)
        var entitlements: [CustomerTruth.Entitlement] = []
        var bestPerGroup: [String: (level: Int, entitlement: CustomerTruth.Entitlement)] = [:]
        for subscription in state.subscriptions.records(of: customerId) where subscription.hasService {
            let level = catalog.product(subscription.productId)?.level ?? Int.max
            let entitlement = CustomerTruth.Entitlement(
                productId: subscription.productId, type: .autoRenewable, ownership: subscription.ownership,
                transactionId: subscription.latestTransactionId, originalTransactionId: subscription.originalTransactionId,
                expiresDate: subscription.expiresDate, status: subscription.status,
                willAutoRenew: subscription.autoRenewEnabled
            )
            if let best = bestPerGroup[subscription.groupId],
                best.level < level || (best.level == level && best.entitlement.ownership == .purchased)
            {
                continue
            }
            bestPerGroup[subscription.groupId] = (level, entitlement)
        }
        entitlements += bestPerGroup.values.map(\.entitlement)
        var balance: [String: Int] = [:]
        for record in state.transactions.records(of: customerId) where record.info.revocationDate == nil {
            let info = record.info
            switch info.type {
            case .nonConsumable:
                if !entitlements.contains(where: { $0.productId == info.productId }) {
                    entitlements.append(
                        .init(
                            productId: info.productId, type: info.type, ownership: info.inAppOwnershipType ?? .purchased,
                            transactionId: info.transactionId, originalTransactionId: info.originalTransactionId
                        ))
                }
            case .nonRenewing:
                guard let period = catalog.product(info.productId)?.period else { continue }
                let end = state.renewalRate.end(of: period, from: info.purchaseDate)
                if end > state.now {
                    entitlements.append(
                        .init(
                            productId: info.productId, type: info.type, ownership: .purchased,
                            transactionId: info.transactionId, originalTransactionId: info.originalTransactionId,
                            expiresDate: end
                        ))
                }
            case .consumable:
                balance[info.productId, default: 0] += info.quantity ?? 1
            default:
                break
            }
        }
        entitlements.sort { ($0.productId, $0.transactionId) < ($1.productId, $1.transactionId) }
        return CustomerTruth(customerId: customerId, entitlements: entitlements, consumableBalance: balance)
    }
}
