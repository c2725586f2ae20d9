import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

/// The `offers` settings and the offer policy read strictly: every rule that could never match, every key ID that is
/// not one (perhaps the key itself, pasted), named and never echoed.
@Suite("Storekeeper server: offers settings read strictly")
struct OfferConfigurationTests {
    /// A configuration whose app signs offers with a fresh key file (mode 0600), `offers` completed by `extra`.
    static func load(keyId: String = "2X9R4HXF34", _ extra: String = "") throws -> Result<ServerConfiguration, ConfigurationError> {
        let directory = TestFiles.directory.appendingPathComponent("offers-config-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyFile = directory.appendingPathComponent("SubscriptionKey.p8").path
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyFile)
        let escapedKeyId = keyId.replacingOccurrences(of: "\n", with: "\\n")
        let file = directory.appendingPathComponent("config.json").path
        try #"""
        {"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"],
                   "offers": {"issuerId": "57246542-96fe-1a63-e053-0824d011072a", "keyId": "\#(escapedKeyId)", "privateKeyFile": "SubscriptionKey.p8"\#(extra)}}]}
        """#.write(toFile: file, atomically: true, encoding: .utf8)
        do {
            return .success(try ServerConfiguration.load(path: file))
        } catch {
            return .failure(error)
        }
    }

    @Test("a valid policy loads; its key is loaded at start")
    func valid() throws {
        let loaded = try Self.load(
            #", "rules": [{"offerId": "winback.month", "productIds": ["pro.monthly"], "customers": "lapsed", "oncePerCustomer": true, "environments": ["Sandbox"]}], "subscriptionGroups": {"21000001": ["pro.monthly", "pro.yearly"]}"#
        )
        guard case .success(let configuration) = loaded else {
            Issue.record("refused: \(loaded)")
            return
        }
        #expect(configuration.apps[0].offers?.rules.first?.customers == .lapsed)
        #expect(configuration.apps[0].offers?.keyId == "2X9R4HXF34" && configuration.apps[0].offers?.subscriptionGroups["21000001"]?.count == 2)
    }

    @Test(
        "rules that could never match, a product in two groups, and unknown keys are refused, naming the setting",
        arguments: [
            (#", "rules": [{"offerId": "promo half"}]"#, "rules[0].offerId"),
            (#", "rules": [{"offerId": "promo\u2063half"}]"#, "rules[0].offerId"),
            (#", "rules": [{"offerId": "promo", "productIds": []}]"#, "rules[0].productIds is empty"),
            (#", "rules": [{"offerId": "promo", "productIds": ["a b"]}]"#, "rules[0].productIds"),
            (#", "rules": [{"offerId": "promo", "environments": ["Prod"]}]"#, "rules[0].environments"),
            (#", "rules": [{"offerId": "promo", "environments": ["Xcode"]}]"#, "rules[0].environments"),
            (#", "rules": [{"offerId": "promo", "customers": "lapsd"}]"#, "not an audience"),
            (#", "rules": [{"offerId": "promo", "oncePerCustomers": true}]"#, "oncePerCustomer"),
            (#", "subscriptionGroups": {"1": ["pro.monthly"], "2": ["pro.monthly"]}"#, "two subscription groups"),
            (#", "subscriptionGroups": {"": ["pro.monthly"]}"#, "subscriptionGroups"),
            (#", "subscriptionGroups": {"1": []}"#, "at least one product"),
            (
                #", "rules": [{"offerId": "promo", "productIds": ["pro.montly"]}], "subscriptionGroups": {"1": ["pro.monthly"]}"#,
                "rules[0].productIds holds 'pro.montly', in no group of subscriptionGroups"
            ),
        ])
    func refused(fragment: String, named: String) throws {
        let loaded = try Self.load(fragment)
        guard case .failure(let error) = loaded else {
            Issue.record("\(fragment) was accepted")
            return
        }
        #expect(error.message.contains(named), "\(fragment): \(error.message)")
    }

    @Test("a key ID that is not one (a PEM pasted, spaces, a line break) is refused without being repeated")
    func keyIds() throws {
        let pem = P256.Signing.PrivateKey().pemRepresentation
        for keyId in [pem, "ab cd", "KEY\n", "", String(repeating: "A", count: 65)] {
            let loaded = try Self.load(keyId: keyId)
            guard case .failure(let error) = loaded else {
                Issue.record("key ID \(keyId.prefix(10)) was accepted")
                continue
            }
            #expect(error.message.contains("offers.keyId is not a key ID"), "\(error.message)")
            #expect(!error.message.contains("PRIVATE KEY") && !error.message.contains("MIG"), "the key is not echoed")
        }
    }
}

@Suite("Offer policy: what the ledger says of a customer")
struct OfferFactsTests {
    @Test("a customer in billing grace is subscribed, one in billing retry neither subscribed nor lapsed; an expired one lapsed")
    func standing() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        func ledger(expires: Date, grace: Date?, retry: Bool) -> Ledger {
            var info = TransactionInfo(
                transactionId: "2000000000000001", originalTransactionId: "2000000000000001", bundleId: "com.example.app", productId: "pro.monthly",
                purchaseDate: expires.addingTimeInterval(-30 * 86_400), type: .autoRenewable)
            info.expiresDate = expires
            info.environment = .sandbox
            info.signedDate = now
            var ledger = Ledger()
            ledger.apply(info, jws: "", source: "test")
            try? ledger.link(info, to: "ada")
            var renewal = RenewalInfo(originalTransactionId: info.originalTransactionId)
            renewal.gracePeriodExpiresDate = grace
            renewal.isInBillingRetryPeriod = retry
            ledger.subscriptions[
                LedgerKey(.sandbox, info.originalTransactionId),
                default: LedgerSubscription(key: LedgerKey(.sandbox, info.originalTransactionId), bundleId: "com.example.app")
            ].renewalInfo = renewal
            return ledger
        }
        let policy = OfferPolicy()
        func facts(_ ledger: Ledger) -> OfferPolicy.Facts {
            policy.facts(ledger: ledger, customerId: "ada", bundleId: "com.example.app", productId: "pro.monthly", offerId: "winback", now: now)
        }
        let grace = facts(ledger(expires: now.addingTimeInterval(-86_400), grace: now.addingTimeInterval(86_400), retry: true))
        #expect(grace.subscribed && !grace.lapsed)
        let retry = facts(ledger(expires: now.addingTimeInterval(-86_400), grace: nil, retry: true))
        #expect(!retry.subscribed && !retry.lapsed && retry.inBillingRetry)
        let expired = facts(ledger(expires: now.addingTimeInterval(-86_400), grace: nil, retry: false))
        #expect(!expired.subscribed && expired.lapsed)
        let active = facts(ledger(expires: now.addingTimeInterval(86_400), grace: nil, retry: false))
        #expect(active.subscribed && !active.lapsed && active.transactionIds == ["2000000000000001"])
    }

    @Test("a once-per-customer offer with a signature outstanding is refused")
    func outstanding() {
        let policy = OfferPolicy(rules: [.init(offerId: "winback", customers: .lapsed, oncePerCustomer: true)])
        var facts = OfferPolicy.Facts(
            group: nil, subscribed: false, lapsed: true, hadIntroductoryOffer: false, redemptions: 0, latestTransactionId: "1")
        #expect(policy.decide(offerId: "winback", productId: "p", environment: .sandbox, facts: facts) == .allowed(rule: 0))
        facts.outstandingSignature = Date()
        guard case .refused(let code, _) = policy.decide(offerId: "winback", productId: "p", environment: .sandbox, facts: facts) else {
            Issue.record("a second signature was allowed")
            return
        }
        #expect(code == "offer-signature-outstanding")
    }

    @Test("a customer in billing retry is neither lapsed nor new: neither win-back nor a new customer's offer")
    func retryIsNotNew() {
        let policy = OfferPolicy(rules: [.init(offerId: "welcome", customers: .new), .init(offerId: "winback", customers: .lapsed)])
        var facts = OfferPolicy.Facts(
            group: "g", subscribed: false, lapsed: false, hadIntroductoryOffer: false, redemptions: 0, latestTransactionId: "1")
        facts.inBillingRetry = true
        for offer in ["welcome", "winback"] {
            guard case .refused(let code, _) = policy.decide(offerId: offer, productId: "p", environment: .sandbox, facts: facts) else {
                Issue.record("\(offer) was allowed to a customer in billing retry")
                continue
            }
            #expect(code == "offer-not-eligible")
        }
    }

    @Test("invisible characters of every kind are escaped in messages, and are no identifier")
    func invisible() {
        for scalar: Unicode.Scalar in [
            "\u{2063}", "\u{200B}", "\u{3164}", "\u{115F}", "\u{180E}", "\u{034F}", "\u{FE0F}", "\u{E0041}", "\u{1D173}", "\u{00AD}",
        ] {
            let text = "a\(Character(scalar))b"
            #expect(!UntrustedText.escaped(text).unicodeScalars.contains(scalar), "U+\(String(scalar.value, radix: 16))")
            #expect(!OfferPolicy.isIdentifier(text), "U+\(String(scalar.value, radix: 16))")
        }
        #expect(UntrustedText.escaped("promo.half é ü 日本") == "promo.half é ü 日本")
    }
}
