import AppStoreModels
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: CONSUMPTION_REQUESTs answered by policy or by a person, against the simulator")
struct ConsumptionRequestTests {
    typealias T = RecoveryTestbed

    /// Refund accidental purchases of consumables by new customers; decline for the rest of the consumables; leave
    /// subscriptions to a person.
    static let policy = ConsumptionPolicy(
        policy: .rules,
        rules: [
            .init(
                name: "accidental coins", when: .init(productTypes: [.consumable], reasons: [.unintendedPurchase], maxTenureDays: 30, maxRefunds: 0),
                then: .answer(.init(deliveryStatus: .delivered, sampleContentProvided: false, refundPreference: .grantFull, consumptionPercentage: 0))
            ),
            .init(when: .init(productTypes: [.consumable]), then: .answer(.init(deliveryStatus: .delivered, refundPreference: .decline))),
        ],
        otherwise: .manual)

    static func configure(_ policy: ConsumptionPolicy) -> @Sendable (inout ServerConfiguration) -> Void {
        { configuration in
            configuration.apps[0].consumption = policy
            configuration.jobs.consumptionCheckSeconds = 0.1
        }
    }

    /// What the simulator received for `transactionId`: the latest body and how many were accepted.
    static func received(_ testbed: RecoveryTestbed, _ transactionId: String) async throws -> (latest: JSONValue?, count: Int) {
        try await testbed.simulator.read { engine in
            (engine.state.consumptionInformation[transactionId], engine.consumptionInformationReceived[transactionId] ?? 0)
        }
    }

    /// Polls the support API until the request for `transactionId` is in `state` (up to 20 s); its JSON.
    static func request(
        _ base: String, transactionId: String, state: String, within seconds: Double = 20
    ) async throws -> [String: Any] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        var last: [[String: Any]] = []
        repeat {
            let listed = try await T.call(
                .GET,
                base + "/v1/support/consumption-requests?state=\(ConsumptionRequestRecord.State.allCases.map(\.rawValue).joined(separator: ","))",
                key: T.supportKey)
            last = listed.json["consumptionRequests"] as? [[String: Any]] ?? []
            if let found = last.first(where: { $0["transactionId"] as? String == transactionId && $0["state"] as? String == state }) { return found }
            try await Task.sleep(for: .milliseconds(100))
        } while ContinuousClock.now < deadline
        Issue.record("no request for \(transactionId) in state \(state): \(last)")
        return [:]
    }

    /// A customer of the app who bought `productId` and submitted it; the transaction.
    static func buy(_ productId: String, as customer: String, _ testbed: RecoveryTestbed, _ base: String) async throws -> String {
        let purchase = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "apple-\(customer)")
            return try engine.purchase(.init(customerId: "apple-\(customer)", productId: productId))
        }
        #expect(try await T.submit(purchase.signedTransaction, for: customer, to: base) == 200)
        await testbed.deliverer.deliverDue()
        return purchase.transactionId
    }

    static func consent(_ customer: String, _ consented: Bool, _ base: String) async throws {
        let answer = try await T.call(
            .PUT, base + "/v1/customers/\(customer)/consumption-consent", key: T.appKey, body: #"{"consented": \#(consented)}"#)
        #expect(answer.status == 200 && answer.json["consented"] as? Bool == consented, "\(answer.json)")
    }

    @Test(
        "by rules: a consenting customer's request is answered within the window with the rule's answer, once, and audited; a customer who did not consent gets no answer"
    )
    func byRules() async throws {
        try await T.serving(.sandbox, configure: Self.configure(Self.policy)) { testbed, base in
            let coins = try await Self.buy("coins.100", as: "ann", testbed, base)
            let bens = try await Self.buy("coins.100", as: "ben", testbed, base)
            try await Self.consent("ann", true, base)
            try await Self.consent("ben", false, base)
            // Only a customer the app knows: a consent kept for any ID could not be erased with its customer.
            let unknown = try await T.call(.PUT, base + "/v1/customers/nobody/consumption-consent", key: T.appKey, body: #"{"consented": true}"#)
            #expect(unknown.status == 404 && SupportExtensionTests.error(unknown).code == "unknown-customer", "\(unknown.json)")
            try await testbed.act { (engine) throws(SimulatorError) in
                try engine.requestRefund(transactionId: coins, reason: .unintendedPurchase)
                try engine.requestRefund(transactionId: bens, reason: .unintendedPurchase)
            }
            let sent = try await Self.request(base, transactionId: coins, state: "sent")
            #expect(sent["decidedBy"] as? String == "rules[0] (accidental coins)" && sent["attempts"] as? Int == 1, "\(sent)")
            #expect((sent["facts"] as? [String: Any])?["consented"] as? Bool == true && sent["customerId"] as? String == "ann", "\(sent)")
            let requestedAt = try #require(sent["requestedAt"] as? Int)
            #expect(sent["deadline"] as? Int == requestedAt + 12 * 3_600_000, "\(sent)")
            let (latest, count) = try await Self.received(testbed, coins)
            #expect(count == 1)
            #expect(
                latest
                    == .object([
                        "customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(false),
                        "refundPreference": .string("GRANT_FULL"), "consumptionPercentage": .integer(0),
                    ]), "\(String(describing: latest))")

            let notConsented = try await Self.request(base, transactionId: bens, state: "not-consented")
            #expect(notConsented["decidedBy"] as? String == "not consented")
            #expect(try await Self.received(testbed, bens).count == 0, "nothing is sent for a customer who did not consent")

            // The customer page shows the request and the audit record of the answer.
            let page = try await T.call(.GET, base + "/v1/support/customers/ann", key: T.supportKey)
            #expect((page.json["consumptionRequests"] as? [[String: Any]])?.first?["state"] as? String == "sent", "\(page.json)")
            #expect((page.json["consumptionConsent"] as? [String: Any])?["consented"] as? Bool == true)
            let actions = page.json["actions"] as? [[String: Any]] ?? []
            #expect(
                actions.contains {
                    $0["action"] as? String == "consumption-information" && $0["outcome"] as? String == "sent"
                        && $0["keyName"] as? String == "consumption-policy" && $0["target"] as? String == coins
                }, "\(actions)")
            // The request is not answered again: the next passes find nothing to do.
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await Self.received(testbed, coins).count == 1)
            let metrics = try await HTTPClient.shared.execute(HTTPClientRequest(url: base + "/metrics"), timeout: .seconds(10))
            let text = String(buffer: try await metrics.body.collect(upTo: 1 << 22))
            for (outcome, count) in [("sent", 1), ("not-consented", 1), ("late", 0), ("failed", 0)] {
                #expect(
                    text.contains(#"storekeeper_consumption_requests_total{bundle_id="com.example.storekeeper",outcome="\#(outcome)"} \#(count)"#),
                    "\(outcome) \(count)")
            }
        }
    }

    @Test("with the App Store failing for a while, the answer is retried with backoff and sent once when it recovers")
    func retried() async throws {
        try await T.serving(.sandbox, configure: Self.configure(Self.policy)) { testbed, base in
            let coins = try await Self.buy("coins.100", as: "cat", testbed, base)
            try await Self.consent("cat", true, base)
            try await testbed.act { engine in
                var faults = engine.state.faults
                faults.failNextAPIRequests = 5
                engine.setFaults(faults)
            }
            try await testbed.act { (engine) throws(SimulatorError) in try engine.requestRefund(transactionId: coins, reason: .other) }
            // The client's own retries are used up; the job records the failure and waits (by the server's clock).
            let deadline = ContinuousClock.now + .seconds(30)
            var pending: [String: Any] = [:]
            repeat {
                pending = try await Self.request(base, transactionId: coins, state: "pending")
                if pending["attempts"] as? Int == 1 { break }
                try await Task.sleep(for: .milliseconds(200))
            } while ContinuousClock.now < deadline
            #expect(pending["attempts"] as? Int == 1 && (pending["lastError"] as? String)?.contains("retrying") == true, "\(pending)")
            #expect(try await Self.received(testbed, coins).count == 0)
            // Its next attempt is due within the backoff (30 s ± 20 %): moved past it, the job sends it.
            testbed.clock.advance(by: 40)
            let sent = try await Self.request(base, transactionId: coins, state: "sent")
            #expect(sent["attempts"] as? Int == 2 && sent["lastError"] == nil, "\(sent)")
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await Self.received(testbed, coins).count == 1, "sent once")
            #expect(try await Self.received(testbed, coins).latest?.objectValue?["refundPreference"] == .string("DECLINE"))
        }
    }

    @Test(
        "manual: the request waits for a person with its deadline; a support key's answer is sent and audited under its name; a second answer is a 409; past 12 hours it is late"
    )
    func manual() async throws {
        try await T.serving(.sandbox, configure: Self.configure(ConsumptionPolicy(policy: .manual))) { testbed, base in
            let monthly = try await Self.buy("pro.monthly", as: "dee", testbed, base)
            let unlock = try await Self.buy("unlock.lifetime", as: "eve", testbed, base)
            let coins = try await Self.buy("coins.100", as: "gil", testbed, base)
            for customer in ["dee", "eve", "gil"] { try await Self.consent(customer, true, base) }
            try await testbed.act { (engine) throws(SimulatorError) in
                try engine.requestRefund(transactionId: monthly, reason: .unsatisfiedWithPurchase)
                try engine.requestRefund(transactionId: unlock, reason: .fulfillmentIssue)
                try engine.requestRefund(transactionId: coins, reason: .other)
            }
            let waiting = try await Self.request(base, transactionId: monthly, state: "manual")
            let uuid = try #require(waiting["notificationUUID"] as? String)
            // The same request whatever the case of its UUID.
            #expect(try await T.call(.GET, base + "/v1/support/consumption-requests/\(uuid.uppercased())", key: T.supportKey).status == 200)

            // gil withdraws consent while his request waits for a person: the answer is taken, and never sent.
            let gils = try #require(try await Self.request(base, transactionId: coins, state: "manual")["notificationUUID"] as? String)
            try await Self.consent("gil", false, base)
            let taken = try await T.call(
                .POST, base + "/v1/support/consumption-requests/\(gils)/answer", key: T.supportKey, body: #"{"deliveryStatus": "DELIVERED"}"#)
            #expect(taken.status == 200, "\(taken.json)")
            let withdrawn = try await Self.request(base, transactionId: coins, state: "not-consented")
            #expect((withdrawn["lastError"] as? String)?.contains("withdrew") == true, "\(withdrawn)")
            #expect(try await Self.received(testbed, coins).count == 0)
            #expect(waiting["decidedBy"] as? String == "policy manual" && waiting["deadline"] is Int, "\(waiting)")
            let answerURL = base + "/v1/support/consumption-requests/\(uuid)/answer"
            // Checked before anything is stored: Apple's rules, the body's shape, the key's scope.
            for (body, code) in [
                (#"{"deliveryStatus": "DELIVERED", "refundPreference": "GRANT_PRORATED"}"#, "invalid-parameter"),
                (#"{"deliveryStatus": "UNDELIVERED_OTHER", "consumptionPercentage": 5000}"#, "invalid-parameter"),
                (#"{"deliveryStatus": "LOST"}"#, "invalid-parameter"), (#"{"delivery": "DELIVERED"}"#, "malformed-body"),
            ] {
                let refused = try await T.call(.POST, answerURL, key: T.supportKey, body: body)
                #expect(refused.status == 400 && SupportExtensionTests.error(refused).code == code, "\(body): \(refused.json)")
            }
            #expect(try await T.call(.POST, answerURL, key: T.appKey, body: #"{"deliveryStatus": "DELIVERED"}"#).status == 403)
            let unknown = try await T.call(
                .POST, base + "/v1/support/consumption-requests/nope/answer", key: T.supportKey, body: #"{"deliveryStatus": "DELIVERED"}"#)
            #expect(unknown.status == 404 && SupportExtensionTests.error(unknown).code == "unknown-consumption-request", "\(unknown.json)")

            // A percentage is never sent for an auto-renewable (Apple computes it): left out of the request.
            // Four people answer at once: one answer is taken; the others are told why from the request as it is now
            // (they were told its 12 hours had passed).
            let answers = try await T.callConcurrently(
                4, .POST, answerURL, key: T.supportKey,
                body: #"{"deliveryStatus": "DELIVERED", "refundPreference": "DECLINE", "consumptionPercentage": 40000}"#)
            #expect(answers.filter { $0.status == 200 }.count == 1, "\(answers.map(\.json))")
            for refused in answers where refused.status != 200 {
                let message = SupportExtensionTests.error(refused).message
                #expect(refused.status == 409 && !message.contains("12 hours") && message.contains("decided by key support"), "\(refused.json)")
            }
            let answered = try #require(answers.first { $0.status == 200 })
            #expect(answered.json["state"] as? String == "pending" && answered.json["decidedBy"] as? String == "key support")
            let sent = try await Self.request(base, transactionId: monthly, state: "sent")
            #expect(sent["decidedBy"] as? String == "key support")
            let latest = try await Self.received(testbed, monthly).latest?.objectValue
            #expect(latest?["refundPreference"] == .string("DECLINE") && latest?["consumptionPercentage"] == nil, "\(String(describing: latest))")
            let again = try await T.call(.POST, answerURL, key: T.supportKey, body: #"{"deliveryStatus": "DELIVERED"}"#)
            #expect(again.status == 409 && SupportExtensionTests.error(again).code == "consumption-request-closed", "\(again.json)")
            let actions = try await T.call(.GET, base + "/v1/support/customers/dee", key: T.supportKey).json["actions"] as? [[String: Any]] ?? []
            #expect(actions.contains { $0["keyName"] as? String == "support" && $0["outcome"] as? String == "sent" }, "\(actions)")

            // Nobody answers eve's within 12 hours: late, and an answer after that is refused.
            let eves = try await Self.request(base, transactionId: unlock, state: "manual")
            testbed.clock.advance(by: 12 * 3_600 + 1)
            let late = try await Self.request(base, transactionId: unlock, state: "late")
            #expect((late["lastError"] as? String)?.contains("12 hours") == true, "\(late)")
            let tooLate = try await T.call(
                .POST, base + "/v1/support/consumption-requests/\(eves["notificationUUID"] as? String ?? "")/answer", key: T.supportKey,
                body: #"{"deliveryStatus": "DELIVERED"}"#)
            #expect(tooLate.status == 409, "\(tooLate.json)")
            #expect(try await Self.received(testbed, unlock).count == 0)
        }
    }
}

extension JSONValue {
    var objectValue: [String: JSONValue]? {
        if case .object(let fields) = self { return fields }
        return nil
    }
}
