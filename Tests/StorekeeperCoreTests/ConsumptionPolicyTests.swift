import AppStoreModels
import Foundation
import StorekeeperCore
import Testing

@Suite("Consumption policy: rules, consent, and what Apple would refuse")
struct ConsumptionPolicyTests {
    static func facts(
        _ type: ProductType = .consumable, reason: ConsumptionRequestReason? = .unintendedPurchase, tenure: Int = 1, refunds: Int = 0,
        consumed: Double? = nil, consented: Bool = true
    ) -> ConsumptionFacts {
        ConsumptionFacts(
            productType: type, productId: "coins.100", reason: reason, tenureDays: tenure, refunds: refunds, consumedPercent: consumed,
            consented: consented)
    }

    static let grant = ConsumptionAnswer(deliveryStatus: .delivered, refundPreference: .grantFull, consumptionPercentage: 0)
    static let decline = ConsumptionAnswer(deliveryStatus: .delivered, refundPreference: .decline)

    @Test("the first matching rule decides, then otherwise; every condition given must hold; an unknown fact never matches")
    func firstMatch() {
        let policy = ConsumptionPolicy(
            policy: .rules,
            rules: [
                .init(name: "new", when: .init(reasons: [.unintendedPurchase], maxTenureDays: 3, maxRefunds: 0), then: .answer(Self.grant)),
                .init(when: .init(productTypes: [.autoRenewable], maxConsumedPercent: 20), then: .manual),
                .init(when: .init(minRefunds: 2), then: .noAnswer),
            ],
            otherwise: .answer(Self.decline))
        #expect(policy.decide(Self.facts()).decidedBy == "rules[0] (new)")
        #expect(policy.decide(Self.facts()).outcome == .answer(Self.grant))
        #expect(policy.decide(Self.facts(tenure: 4)).decidedBy == "otherwise")
        #expect(policy.decide(Self.facts(refunds: 1)).decidedBy == "otherwise")
        #expect(policy.decide(Self.facts(.autoRenewable, reason: .other, consumed: 10)).decidedBy == "rules[1]")
        #expect(policy.decide(Self.facts(.autoRenewable, reason: .other, consumed: 30)).decidedBy == "otherwise")
        // How much of a consumable was used is not known: a rule on it does not match.
        #expect(policy.decide(Self.facts(.consumable, reason: .other)).decidedBy == "otherwise")
        #expect(policy.decide(Self.facts(reason: .other, refunds: 2)).outcome == .noAnswer)
    }

    @Test("without consent nothing is sent, by rules or by a person; off answers nothing")
    func consent() {
        let rules = ConsumptionPolicy(policy: .rules, rules: [.init(when: .init(), then: .answer(Self.grant))])
        #expect(rules.decide(Self.facts(consented: false)).outcome == .noAnswer)
        #expect(rules.decide(Self.facts(consented: false)).decidedBy == "not consented")
        #expect(ConsumptionPolicy(policy: .manual).decide(Self.facts(consented: false)).decidedBy == "not consented")
        #expect(ConsumptionPolicy(policy: .manual).decide(Self.facts()).outcome == .manual)
        #expect(ConsumptionPolicy(policy: .off).decide(Self.facts()).decidedBy == "policy off")
    }

    @Test("answers Apple would refuse and conditions that cannot hold are named")
    func problems() {
        let policy = ConsumptionPolicy(
            policy: .manual,
            rules: [
                .init(
                    when: .init(minTenureDays: 5, maxTenureDays: 2),
                    then: .answer(.init(deliveryStatus: .delivered, refundPreference: .grantProrated))),
                .init(
                    when: .init(productTypes: [], minConsumedPercent: 120),
                    then: .answer(.init(deliveryStatus: .undeliveredOther, consumptionPercentage: 10))),
                .init(when: .init(reasons: ["ACCIDENT"]), then: .answer(.init(deliveryStatus: "LOST"))),
            ])
        let problems = policy.problems()
        for expected in [
            "rules[0]: minTenureDays is above maxTenureDays", "rules[0].then: GRANT_PRORATED needs a consumptionPercentage from 1 to 99999",
            "rules[1]: minConsumedPercent must be from 0 to 100", "rules[1]: productTypes is empty",
            "rules[1].then: consumptionPercentage must be 0 when deliveryStatus is not DELIVERED", "rules[2]: 'ACCIDENT' is not a reason",
            "rules[2].then: deliveryStatus 'LOST' is not one of", "rules are given but policy is \"manual\"",
        ] {
            #expect(problems.contains { $0.hasPrefix(expected) }, "\(expected) in \(problems.joined(separator: " | "))")
        }
        #expect(Self.grant.problem() == nil && ConsumptionPolicy().problems().isEmpty)
    }

    @Test("facts: tenure from the first purchase, refunds before the request (family copies and this one not counted), the part of a period used")
    func facts() throws {
        let start = Date(timeIntervalSince1970: 1_700_000_000)
        func transaction(_ id: String, _ type: ProductType, bought: Date, expires: Date? = nil, revoked: Date? = nil) throws -> TransactionInfo {
            var object: [String: Any] = [
                "transactionId": id, "originalTransactionId": id, "bundleId": "com.example.storekeeper", "productId": "p", "type": type.rawValue,
                "purchaseDate": Int(bought.timeIntervalSince1970 * 1000), "inAppOwnershipType": "PURCHASED", "signedDate": 0,
                "environment": "Sandbox", "quantity": 1, "transactionReason": "PURCHASE", "storefront": "USA", "storefrontId": "143441",
            ]
            if let expires { object["expiresDate"] = Int(expires.timeIntervalSince1970 * 1000) }
            if let revoked { object["revocationDate"] = Int(revoked.timeIntervalSince1970 * 1000) }
            return try AppStoreJSON.makeDecoder().decode(TransactionInfo.self, from: JSONSerialization.data(withJSONObject: object))
        }
        let monthly = try transaction(
            "3", .autoRenewable, bought: start.addingTimeInterval(40 * 86_400), expires: start.addingTimeInterval(70 * 86_400))
        let history = [
            try transaction("1", .consumable, bought: start, revoked: start.addingTimeInterval(86_400)),
            try transaction("2", .consumable, bought: start.addingTimeInterval(86_400), revoked: start.addingTimeInterval(200 * 86_400)), monthly,
        ]
        let facts = ConsumptionFacts.of(
            monthly, reason: .other, requestedAt: start.addingTimeInterval(46 * 86_400), customerTransactions: history, consented: true)
        #expect(facts.tenureDays == 46 && facts.refunds == 1 && facts.productType == .autoRenewable)
        #expect(abs((facts.consumedPercent ?? 0) - 20) < 0.001, "\(String(describing: facts.consumedPercent))")
        #expect(
            Self.grant.request(for: .autoRenewable).consumptionPercentage == nil && Self.grant.request(for: .consumable).consumptionPercentage == 0)
    }
}
