import AppStoreModels
import AppStoreReceipts
import Foundation

extension LifecycleEngine {
    /// The app receipt a customer's device would hold for `bundleId` now (StoreKit 1's `appStoreReceiptURL`): the
    /// App Store's fields and one in-app entry per transaction of theirs in the app, family-shared ones included
    /// (finished consumables left out, as Apple leaves them out), signed by the simulator's receipt signer.
    package func appReceipt(customerId: String, bundleId: String?) throws(SimulatorError) -> [UInt8] {
        let customer = try customer(customerId)
        guard let app = bundleId.map({ id in catalog.apps.first { $0.bundleId == id } }) ?? catalog.apps.first else {
            throw SimulatorError(.notFound, "no app '\(bundleId ?? "")' in the catalog")
        }
        guard let receiptSigner else { throw SimulatorError(.storage, "this simulator has no receipt signer") }
        var receipt = AppReceipt(
            receiptType: state.environment == .production ? "Production" : "ProductionSandbox", bundleId: app.bundleId,
            applicationVersion: "1", originalApplicationVersion: "1.0", creationDate: state.now)
        let records = transactions(customerId: customer.id, bundleId: app.bundleId)
            .filter { !($0.info.type == .consumable && $0.finished) }
            .sorted { ($0.info.purchaseDate, $0.info.transactionId) < ($1.info.purchaseDate, $1.info.transactionId) }
        for record in records {
            let info = record.info
            var purchase = InAppPurchase()
            purchase.quantity = info.quantity ?? 1
            purchase.productId = info.productId
            purchase.transactionId = info.transactionId
            purchase.originalTransactionId = info.originalTransactionId
            purchase.purchaseDate = info.purchaseDate
            purchase.originalPurchaseDate = info.originalPurchaseDate
            purchase.expiresDate = info.expiresDate
            purchase.webOrderLineItemId = info.webOrderLineItemId.flatMap { Int64($0) }
            purchase.cancellationDate = info.revocationDate
            if info.type == .autoRenewable { purchase.isInIntroOfferPeriod = info.offerType == .introductory }
            receipt.inAppPurchases.append(purchase)
        }
        do {
            return try receiptSigner.sign(receipt)
        } catch {
            throw SimulatorError(.storage, "the receipt could not be signed: \(error)")
        }
    }

    /// The StoreKit 1 transaction receipt of one transaction (`SKPaymentTransaction.transactionReceipt`, deprecated
    /// since iOS 7): its `purchase-info` names the transaction; the `signature` is the simulator leaf's over it.
    package func legacyTransactionReceipt(transactionId: String) throws(SimulatorError) -> String {
        guard let record = state.transactions[transactionId] else { throw SimulatorError(.notFound, "no transaction '\(transactionId)'") }
        guard let receiptSigner else { throw SimulatorError(.storage, "this simulator has no receipt signer") }
        let info = record.info
        let signature: [UInt8]
        do {
            signature = try receiptSigner.signature(of: Array("\(info.transactionId)|\(info.productId)".utf8))
        } catch {
            throw SimulatorError(.storage, "the receipt could not be signed: \(error)")
        }
        return LegacyTransactionReceipt.make(
            transactionId: info.transactionId, originalTransactionId: info.originalTransactionId, productId: info.productId, bundleId: info.bundleId,
            purchaseDate: info.purchaseDate, quantity: info.quantity ?? 1,
            environment: state.environment == .production ? "Production" : "Sandbox", signature: signature)
    }
}
