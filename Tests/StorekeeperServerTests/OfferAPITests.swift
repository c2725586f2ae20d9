import AppStoreModels
import AppStoreSimulator
import Crypto
import Foundation
import NIOHTTP1
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

/// Subscription offers signed by the server under its offer policy, and accepted (or refused) by the simulator as
/// StoreKit would.
@Suite("Storekeeper server: offers signed by the server")
struct OfferAPITests {
    typealias T = RecoveryTestbed

    static let group = ["premium.monthly", "pro.monthly", "pro.yearly", "basic.monthly"]

    static func error(_ answer: (status: Int, json: [String: Any])) -> (code: String?, message: String) {
        let error = answer.json["error"] as? [String: Any]
        return (error?["code"] as? String, error?["message"] as? String ?? "")
    }

    @Test(
        "win-back for a lapsed customer and a promotional offer for a subscriber are signed (V1, V2), verified by Python and accepted by the simulator once; the policy refuses the others, with an audit record"
    )
    func offers() async throws {
        let testbed = try await T(environment: .sandbox)
        let key = try testbed.simulatorDirectory.loadAPIKeyInfo()
        var configuration = try testbed.configuration(baseURL: "http://127.0.0.1:9", recovery: .init(enabled: false))
        configuration.apps[0].serverAPI = [:]
        configuration.apps[0].offers = .init(
            issuerId: key.issuerId, keyId: key.keyId, privateKeyFile: testbed.simulatorDirectory.apiPrivateKeyFile(keyId: key.keyId).path,
            policy: OfferPolicy(
                rules: [
                    .init(offerId: "winback.month", productIds: ["pro.monthly"], customers: .lapsed, oncePerCustomer: true),
                    .init(offerId: "promo.half", customers: .subscribed),
                ], subscriptionGroups: ["21000001": Self.group]))
        configuration.apps.append(
            .init(bundleId: "com.example.other", appAppleId: 1, environments: [.sandbox], trustedRoots: configuration.apps[0].trustedRoots))
        // ada subscribes with the introductory trial; bob subscribes, turns auto-renew off and lapses.
        let (ada, bob) = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "ada")
            try engine.createCustomer(id: "bob")
            try engine.createCustomer(id: "dave")
            let bob = try engine.purchase(.init(customerId: "bob", productId: "pro.monthly"))
            try engine.setAutoRenew(originalTransactionId: bob.originalTransactionId, enabled: false)
            try engine.advance(by: 40 * 86_400)
            let ada = try engine.purchase(.init(customerId: "ada", productId: "pro.monthly", offerId: "intro.trial"))
            return (ada, bob)
        }
        testbed.clock.set(await testbed.simulator.state.now)
        try await testbed.withServer(configuration) { base in
            _ = try await testbed.simulator.perform { engine in engine.setNotificationURL(nil) }
            #expect(try await T.submit(ada.signedTransaction, for: "ada", to: base) == 200)
            #expect(try await T.submit(bob.signedTransaction, for: "bob", to: base) == 200)
            func sign(
                _ customer: String, _ offer: String, _ body: String, format: String = "v1", query: String = ""
            )
                async throws -> (status: Int, json: [String: Any])
            {
                try await T.call(
                    .POST, base + "/v1/customers/\(customer)/offers/\(offer)/signature?format=\(format)\(query)", key: T.appKey, body: body)
            }

            // bob, lapsed: the win-back offer, V1. Once per customer: of eight asked at once, one is signed (the audit
            // record is a claim; reading the log, then writing it, let nine of ten through).
            let asked = try await T.callConcurrently(
                8, .POST, base + "/v1/customers/bob/offers/winback.month/signature?format=v1", key: T.appKey, body: #"{"productId":"pro.monthly"}"#)
            #expect(asked.filter { $0.status == 200 }.count == 1, "\(asked.map(\.status))")
            #expect(
                asked.filter { $0.status == 403 && Self.error($0).code == "offer-signature-outstanding" }.count == 7, "\(asked.map(\.json))")
            let winback = try #require(asked.first { $0.status == 200 })
            let nonce = try #require(winback.json["nonce"] as? String)
            let timestamp = try #require(winback.json["timestamp"] as? Int64)
            let signature = try #require(winback.json["signature"] as? String)
            let token = try #require(winback.json["appAccountToken"] as? String)
            #expect(nonce == nonce.lowercased() && winback.json["keyIdentifier"] as? String == key.keyId)
            #expect((winback.json["signatureBytes"] as? [Int]).map { Data($0.map(UInt8.init)) } == Data(base64Encoded: signature), "bytes = base64's")
            // Once per customer: a second signature while the first can still be redeemed is refused.
            let second = try await sign("bob", "winback.month", #"{"productId":"pro.monthly"}"#)
            #expect(second.status == 403 && Self.error(second).code == "offer-signature-outstanding", "\(second.json)")
            let issued = try await T.call(.POST, base + "/v1/customers/bob/app-account-token", key: T.appKey)
            #expect(issued.json["appAccountToken"] as? String == token, "the customer's own token is signed")
            let offer = OfferSignatureRequest(keyIdentifier: key.keyId, nonce: nonce, timestamp: timestamp, signature: signature)
            var request = LifecycleEngine.PurchaseRequest(
                customerId: "bob", productId: "pro.monthly", appAccountToken: LowercaseUUID(uuidString: token), offerId: "winback.month")
            // Without the signature, with another token, or changed: StoreKit (the simulator) refuses.
            for (signed, tokenUsed) in [
                (nil, request.appAccountToken), (offer, LowercaseUUID(uuidString: UUID().uuidString)),
                (
                    OfferSignatureRequest(keyIdentifier: key.keyId, nonce: nonce, timestamp: timestamp + 1, signature: signature),
                    request.appAccountToken
                ),
            ] {
                var bad = request
                bad.offerSignature = signed
                bad.appAccountToken = tokenUsed
                await #expect(throws: SimulatorError.self) {
                    _ = try await testbed.simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(bad) }
                }
            }
            request.offerSignature = offer
            let redeemed = try await testbed.simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(request) }
            #expect(redeemed.outcome == "purchased" || redeemed.outcome == "offer-redeemed", "\(redeemed.outcome)")
            do {
                _ = try await testbed.simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(request) }
                Issue.record("a nonce was accepted twice")
            } catch {
                #expect("\(error)".contains("was used already"), "\(error)")
            }

            // ada, subscribed: the promotional offer, V2; the simulator takes it on her active subscription.
            // A V2 signature names only the customer's own transaction.
            let othersTransaction = try await sign(
                "ada", "promo.half", #"{"productId":"pro.monthly","transactionId":"\#(bob.transactionId)"}"#, format: "v2")
            #expect(
                othersTransaction.status == 400 && Self.error(othersTransaction).message.contains("is not one of customer"),
                "\(othersTransaction.json)")
            // The offer ID in the path is percent-decoded, as customer IDs are.
            let promo = try await sign("ada", "promo%2Ehalf", #"{"productId":"pro.monthly","transactionId":"\#(ada.transactionId)"}"#, format: "v2")
            #expect(promo.status == 200, "\(promo.json)")
            let jws = try #require(promo.json["signedOffer"] as? String)
            var promoRequest = LifecycleEngine.PurchaseRequest(customerId: "ada", productId: "pro.monthly", offerId: "promo.half")
            promoRequest.offerSignature = OfferSignatureRequest(signedOffer: jws)
            let promoted = try await testbed.simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(promoRequest) }
            #expect(promoted.outcome == "offer-redeemed", "\(promoted.outcome)")

            // Independent verification of what the route answered (the library's own checks are in OfferSignatureTests).
            if ExternalTool.succeeds(["python3", "-c", "import jwt, cryptography"]) {
                let directory = testbed.directory.appendingPathComponent("python")
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                let cases: [[String: Any]] = [
                    [
                        "kind": "v1", "signature": signature,
                        "payload": [TestAppStore.bundleID, key.keyId, "pro.monthly", "winback.month", token, nonce, String(timestamp)],
                    ],
                    [
                        // Signed at the simulator's clock, days ahead of the machine's: iat is not judged here.
                        "kind": "jws", "jws": jws, "kid": key.keyId, "audience": "promotional-offer", "verifyIat": false,
                        "claims": [
                            "productId": "pro.monthly", "offerIdentifier": "promo.half", "transactionId": ada.transactionId, "iss": key.issuerId,
                            "bid": TestAppStore.bundleID,
                        ],
                    ],
                ]
                try JSONSerialization.data(withJSONObject: cases).write(to: directory.appendingPathComponent("cases.json"))
                let publicKey = try testbed.simulatorDirectory.loadAPIPublicKey()
                try publicKey.pemRepresentation.write(to: directory.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
                let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                    .appendingPathComponent("AppStoreSigningTests/Verifiers/verify_offers.py").path
                let result = try await ExternalTool.run(
                    ["python3", script, directory.appendingPathComponent("cases.json").path, directory.appendingPathComponent("key.pem").path])
                #expect(result.passed, "\(result.output)")
            } else {
                print("skipped: PyJWT and cryptography are not installed (.ci/run installs them)")
            }

            // The policy's refusals, each named, each audited.
            for (customer, offerId, code) in [
                ("ada", "winback.month", "offer-not-eligible"), ("carol", "promo.half", "offer-not-eligible"), ("ada", "nope", "offer-not-allowed"),
            ] {
                let refused = try await sign(customer, offerId, #"{"productId":"pro.monthly"}"#)
                #expect(refused.status == 403 && Self.error(refused).code == code, "\(customer) \(offerId): \(refused.json)")
            }
            for (query, body, status, code) in [
                ("", #"{"productId":"pro monthly"}"#, 400, "invalid-parameter"), ("", #"{"productId":"pro.monthly","x":1}"#, 400, "malformed-body"),
                ("", #"{"productId":"pro.monthly","transactionId":"12a"}"#, 400, "malformed-body"),
                ("&bundleId=com.example.other", #"{"productId":"pro.monthly"}"#, 403, "other-app"),
                // A product in no configured group (another app's, or none) is not signed for.
                ("", #"{"productId":"no.such.product"}"#, 400, "invalid-parameter"),
            ] {
                let refused = try await sign("bob", "winback.month", body, query: query)
                #expect(refused.status == status && Self.error(refused).code == code, "\(query) \(body): \(refused.json)")
            }
            let badFormat = try await sign("bob", "winback.month", #"{"productId":"pro.monthly"}"#, format: "v3")
            #expect(badFormat.status == 400 && Self.error(badFormat).code == "invalid-parameter")
            let support = try await T.call(.GET, base + "/v1/support/customers/ada?bundleId=com.example.storekeeper", key: T.supportKey)
            let actions = (support.json["actions"] as? [[String: Any]]) ?? []
            #expect(actions.contains { $0["action"] as? String == "sign-offer" && $0["outcome"] as? String == "refused" }, "\(actions)")
            #expect(actions.contains { $0["action"] as? String == "sign-offer" && $0["outcome"] as? String == "done" }, "\(actions)")

            // Introductory-offer eligibility: ada had the trial, so no; the simulator honours the signed no.
            let eligibility = try await T.call(
                .POST, base + "/v1/customers/ada/introductory-offer-eligibility", key: T.appKey, body: #"{"productId":"pro.monthly"}"#)
            #expect(eligibility.status == 200 && eligibility.json["allowIntroductoryOffer"] as? Bool == false, "\(eligibility.json)")
            let signedNo = try #require(eligibility.json["signedEligibility"] as? String)
            let unknown = try await T.call(
                .POST, base + "/v1/customers/carol/introductory-offer-eligibility", key: T.appKey, body: #"{"productId":"pro.monthly"}"#)
            #expect(unknown.status == 422 && Self.error(unknown).code == "no-purchases", "\(unknown.json)")
            var intro = LifecycleEngine.PurchaseRequest(customerId: "dave", productId: "pro.monthly", offerId: "intro.trial")
            intro.introductoryOfferEligibility = signedNo
            do {
                _ = try await testbed.simulator.perform { (engine) throws(SimulatorError) in try engine.purchase(intro) }
                Issue.record("the simulator ignored a signed 'not eligible'")
            } catch {
                #expect("\(error)".contains("may not have the offer"), "\(error)")
            }
        }
    }

    @Test("the policy decides by rule order: product, environment, audience, one redemption per customer")
    func policy() {
        let policy = OfferPolicy(rules: [
            .init(offerId: "winback", productIds: ["a"], customers: .lapsed, oncePerCustomer: true, environments: [.production]),
            .init(offerId: "welcome", customers: .new),
        ])
        var facts = OfferPolicy.Facts(
            group: "g", subscribed: false, lapsed: true, hadIntroductoryOffer: false, redemptions: 0, latestTransactionId: "1")
        #expect(policy.decide(offerId: "winback", productId: "a", environment: .production, facts: facts) == .allowed(rule: 0))
        guard case .refused(let code, _) = policy.decide(offerId: "winback", productId: "a", environment: .sandbox, facts: facts) else {
            Issue.record("another environment was allowed")
            return
        }
        #expect(code == "offer-not-allowed")
        facts.redemptions = 1
        #expect(policy.decide(offerId: "winback", productId: "a", environment: .production, facts: facts) != .allowed(rule: 0))
        if case .refused(let code, _) = policy.decide(offerId: "winback", productId: "a", environment: .production, facts: facts) {
            #expect(code == "offer-redeemed-already")
        }
        if case .refused(let code, let reason) = policy.decide(offerId: "welcome", productId: "z", environment: .sandbox, facts: facts) {
            #expect(code == "offer-not-eligible" && reason.contains("never subscribed"))
        }
        facts = .init(group: nil, subscribed: false, lapsed: false, hadIntroductoryOffer: false, redemptions: 0, latestTransactionId: nil)
        #expect(policy.decide(offerId: "welcome", productId: "z", environment: .sandbox, facts: facts) == .allowed(rule: 1))
    }
}
