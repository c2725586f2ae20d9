import AppStoreModels
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

extension DemoSession {
    /// An API call as the app (or its backend) makes it: status and JSON answer.
    func call(_ method: HTTPMethod, _ path: String, body: String? = nil) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(apiKey)")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 22)
        return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView))) as? [String: Any] ?? [:])
    }

    /// Customers of the StoreKit 1 era, who bought before the server existed (no notification reached it, nothing was
    /// submitted), migrated from the app receipt their old app build sends.
    func migrateFromReceipts() async throws {
        print("── migration from StoreKit 1 app receipts")
        _ = try await simulator.perform { engine in engine.setNotificationURL(nil) }
        let customers = [("legacy-ann", "pro.yearly"), ("legacy-ben", "unlock.lifetime"), ("legacy-cy", "news.weekly")]
        for (customer, product) in customers {
            let bought = try await simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: customer)
                return try engine.purchase(.init(customerId: customer, productId: product))
            }
            // Not submitted: the old app build knew nothing of Storekeeper.
            markSubmitted(bought.transactionId)
            print("  \(customer) bought \(product) before the server existed: Storekeeper knows nothing of it")
        }
        let url = base + "/appstore/notifications"
        _ = try await simulator.perform { engine in engine.setNotificationURL(url) }
        for (customer, _) in customers {
            let receipt = try await simulator.read { (engine) throws(SimulatorError) in
                Data(try engine.appReceipt(customerId: customer, bundleId: nil)).base64EncodedString()
            }
            let answer = try await call(.POST, "/v1/customers/\(customer)/receipts", body: #"{"receipt":"\#(receipt)"}"#)
            guard answer.status == 200, let report = answer.json["import"] as? [String: Any] else {
                throw DemoError(message: "migrating \(customer) from their receipt answered \(answer.status): \(answer.json)")
            }
            let current = try await entitlements(of: customer)
            print(
                "  POST /v1/customers/\(customer)/receipts (\(receipt.count) bytes of base64, verified) → 200: "
                    + "\((report["linked"] as? [String])?.count ?? 0) purchase(s) linked from the App Store's history; [\(current.joined(separator: ", "))]"
            )
        }
        // A receipt changed by one byte (its product, pro.yearly → pro.yearlz) is refused before anything is asked of the
        // App Store.
        var forged = try await simulator.read { (engine) throws(SimulatorError) in try engine.appReceipt(customerId: "legacy-ann", bundleId: nil) }
        let product = Array("pro.yearly".utf8)
        if let at = forged.indices.first(where: { forged[$0...].starts(with: product) }) { forged[at + product.count - 1] = UInt8(ascii: "z") }
        let refused = try await call(.POST, "/v1/customers/mallory/receipts", body: #"{"receipt":"\#(Data(forged).base64EncodedString())"}"#)
        let code = (refused.json["error"] as? [String: Any])?["message"] as? String ?? ""
        print("  legacy-ann's receipt with one byte changed (pro.yearlz), sent for mallory → \(refused.status): \(code.prefix(60))…")
        let stolen = try await call(
            .POST, "/v1/customers/mallory/receipts",
            body:
                #"{"receipt":"\#(try await simulator.read { (engine) throws(SimulatorError) in Data(try engine.appReceipt(customerId: "legacy-ben", bundleId: nil)).base64EncodedString() })"}"#
        )
        print(
            "  legacy-ben's genuine receipt sent for mallory → \(stolen.status) \((stolen.json["error"] as? [String: Any])?["code"] as? String ?? "")\n"
        )
        guard refused.status == 400, stolen.status == 409 else { throw DemoError(message: "a forged or another customer's receipt was taken") }
    }

    /// A lapsed subscriber offered the win-back offer: the server signs it under its policy, the App Store (the
    /// simulator) checks the signature and takes it once; the policy refuses it to a subscriber.
    func offerWinBack() async throws {
        print("── offers signed by the server")
        let lapsed = try await simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "winnie")
            let bought = try engine.purchase(.init(customerId: "winnie", productId: "pro.monthly"))
            try engine.setAutoRenew(originalTransactionId: bought.originalTransactionId, enabled: false)
            return bought
        }
        try await submitNewPurchases()
        try await advance(days: 35)
        print(
            "  winnie subscribed to pro.monthly, turned auto-renew off, and lapsed: [\(try await entitlements(of: "winnie").joined(separator: ", "))]"
        )
        let signed = try await call(.POST, "/v1/customers/winnie/offers/winback.month/signature?format=v1", body: #"{"productId":"pro.monthly"}"#)
        guard signed.status == 200, let nonce = signed.json["nonce"] as? String, let timestamp = signed.json["timestamp"] as? Int64,
            let signature = signed.json["signature"] as? String, let keyId = signed.json["keyIdentifier"] as? String,
            let token = (signed.json["appAccountToken"] as? String).flatMap(LowercaseUUID.init(uuidString:))
        else {
            throw DemoError(message: "the win-back signature answered \(signed.status): \(signed.json)")
        }
        print("  POST /v1/customers/winnie/offers/winback.month/signature → 200: key \(keyId), nonce \(nonce.prefix(8))…, V1 signature for her token")
        var request = LifecycleEngine.PurchaseRequest(
            customerId: "winnie", productId: "pro.monthly", appAccountToken: token, offerId: "winback.month")
        request.offerSignature = OfferSignatureRequest(keyIdentifier: keyId, nonce: nonce, timestamp: timestamp, signature: signature)
        let redeemed = try await simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(request) }
        await deliverer.deliverDue()
        try await submitNewPurchases()
        print(
            "  the App Store checks the signature and sells the offer: \(redeemed.outcome); [\(try await entitlements(of: "winnie").joined(separator: ", "))]"
        )
        do {
            _ = try await simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(request) }
            throw DemoError(message: "the simulator took one offer signature twice")
        } catch let error as SimulatorError {
            print("  the same signature again → refused: \(error.message)")
        }
        let again = try await call(.POST, "/v1/customers/winnie/offers/winback.month/signature", body: #"{"productId":"pro.monthly"}"#)
        print(
            "  the win-back offer asked again, now she subscribes → \(again.status) \((again.json["error"] as? [String: Any])?["code"] as? String ?? "")"
        )
        let eligibility = try await call(.POST, "/v1/customers/winnie/introductory-offer-eligibility", body: #"{"productId":"pro.yearly"}"#)
        print(
            "  introductory-offer eligibility for pro.yearly → \(eligibility.json["allowIntroductoryOffer"] as? Bool == true ? "eligible" : "not eligible"), signed\n"
        )
        guard again.status == 403, eligibility.status == 200, lapsed.originalTransactionId.isEmpty == false else {
            throw DemoError(message: "the offer policy answered \(again.status), eligibility \(eligibility.status)")
        }
    }

    /// Moves the simulator's clock (delivering at each due time) and the server's with it.
    func advance(days: Double) async throws {
        let deliverer = self.deliverer
        try await simulator.advance(by: days * 86_400) { await deliverer.deliverDue() }
        clock.now = await simulator.state.now
        try await submitNewPurchases()
    }
}
