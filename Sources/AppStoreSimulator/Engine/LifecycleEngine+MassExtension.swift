import AppStoreModels
import Foundation

extension LifecycleEngine {
    /// Extends every eligible subscription of `productId` (in the given storefronts, or all): `RENEWAL_EXTENDED`
    /// for each success, `RENEWAL_EXTENSION`/`FAILURE` for each failure, then `RENEWAL_EXTENSION`/`SUMMARY`.
    /// Apple works through these "in hours or days"; the simulator completes at once. Reusing a request
    /// identifier does nothing more.
    package mutating func extendAll(
        productId: String,
        bundleId: String,
        days: Int,
        requestIdentifier: String,
        storefronts: [String]?
    ) throws(SimulatorError) {
        let key = productId + "|" + requestIdentifier
        guard state.massExtensions[key] == nil else { return }
        try transaction { (engine) throws(SimulatorError) in
            var request = MassExtension(
                requestIdentifier: requestIdentifier, productId: productId, bundleId: bundleId,
                storefrontCountryCodes: storefronts
            )
            let targets = engine.state.subscriptions.values.filter { subscription in
                subscription.productId == productId && subscription.sharedFrom == nil && subscription.status != .expired
                    && subscription.status != .revoked
                    && (storefronts.map { $0.contains(engine.state.customers[subscription.customerId]?.storefront ?? "") } ?? true)
            }.sorted { $0.originalTransactionId < $1.originalTransactionId }
            for subscription in targets {
                do {
                    _ = try engine.extendRenewalDate(originalTransactionId: subscription.originalTransactionId, days: days)
                    request.succeededCount += 1
                } catch {
                    request.failedCount += 1
                    try engine.notify(.renewalExtension, .failure, transactionId: subscription.latestTransactionId)
                }
            }
            request.completeDate = engine.state.now
            engine.state.massExtensions[key] = request
            let app = engine.catalog.app(bundleId)
            try engine.enqueue(
                NotificationPayload(
                    notificationType: .renewalExtension, subtype: .summary, notificationUUID: UUID().uuidString.lowercased(),
                    signedDate: engine.nextSigningDate(),
                    summary: NotificationSummary(
                        environment: engine.state.environment, appAppleId: app?.appAppleId, bundleId: bundleId,
                        productId: productId, requestIdentifier: requestIdentifier, storefrontCountryCodes: storefronts,
                        succeededCount: request.succeededCount, failedCount: request.failedCount
                    )
                ),
                bundleId: bundleId, customerId: nil
            )
        }
    }
}
