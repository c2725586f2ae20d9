import AppStoreModels
import AppStoreSimulator
import Foundation
import HTTPTypes
import NIOHTTP1
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: the support API")
struct SupportAPITests {
    typealias T = ServerTestbed

    static func matches(_ answer: Answer) -> [[String: Any]] { answer.json["matches"] as? [[String: Any]] ?? [] }

    @Test("every search kind finds the customer; unknown IDs are a 404 naming what was searched; another app's support key sees nothing of this app")
    func search() async throws {
        var testbed = try T(catalog: T.twoApps)
        let token = try await testbed.store.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        let unused = try await testbed.store.appAccountToken(for: "bob", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        let other = try await testbed.store.appAccountToken(for: "dave", bundleId: "com.example.other", environment: .sandbox, renew: false)
        try testbed.engine.createCustomer(id: "apple-1")
        let bought = try testbed.engine.purchase(.init(customerId: "apple-1", productId: "pro.monthly", appAccountToken: token))
        try testbed.engine.advance(by: 31 * 86_400)
        _ = try testbed.engine.purchase(.init(customerId: "apple-1", productId: "other.unlock", appAccountToken: other))
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        let latest = try #require(
            testbed.engine.state.transactions.values.map(\.info).filter { $0.originalTransactionId == bought.originalTransactionId }
                .max { $0.purchaseDate < $1.purchaseDate })
        #expect(latest.transactionId != bought.transactionId, "a renewal: a transaction ID that is not the original")
        try await testbed.withClient { client in
            for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
            for (q, by) in [
                ("alice", "customerId"), (bought.originalTransactionId, "originalTransactionId"), (latest.transactionId, "transactionId"),
                (token.description, "appAccountToken"), (token.description.uppercased(), "appAccountToken"),
            ] {
                for key in [T.supportKey, T.adminKey] {
                    let answer = try await client.send(.get, "/v1/support/search?q=\(q)", key: key)
                    #expect(answer.status == 200, "\(q): \(answer.json)")
                    let found = Self.matches(answer).filter { $0["matchedBy"] as? String == by }
                    #expect(found.count == 1, "\(q) by \(by): \(answer.json)")
                    #expect(found.first?["customerId"] as? String == "alice" && found.first?["bundleId"] as? String == "com.example.storekeeper")
                    #expect(found.first?["environment"] as? String == "Sandbox")
                }
            }
            // The original transaction ID is also the first transaction's ID: both kinds match, one customer.
            let original = Self.matches(try await client.send(.get, "/v1/support/search?q=\(bought.originalTransactionId)", key: T.supportKey))
            #expect(Set(original.compactMap { $0["matchedBy"] as? String }) == ["transactionId", "originalTransactionId"])
            #expect(Set(original.compactMap { $0["customerId"] as? String }) == ["alice"])
            // A token issued with no purchase yet finds its owner.
            let issued = Self.matches(try await client.send(.get, "/v1/support/search?q=\(unused)", key: T.supportKey))
            #expect(issued.map { $0["customerId"] as? String } == ["bob"] && issued.first?["originalTransactionId"] == nil)
            // A support key of the other app: dave, never alice.
            #expect(Self.matches(try await client.send(.get, "/v1/support/search?q=dave", key: T.otherSupportKey)).count == 1)
            for q in ["alice", bought.originalTransactionId, latest.transactionId, token.description] {
                let answer = try await client.send(.get, "/v1/support/search?q=\(q)", key: T.otherSupportKey)
                #expect(answer.status == 404 && answer.errorCode == "no-match", "\(q): \(answer.json)")
            }
            // Unknown IDs, hostile ones: a 404 quoting them escaped; malformed searches a 400 naming q.
            let unknown = try await client.send(.get, "/v1/support/search?q=2000000999999999", key: T.supportKey)
            #expect(unknown.status == 404 && unknown.errorMessage.contains("2000000999999999"), "\(unknown.json)")
            let hostile = try await client.send(.get, "/v1/support/search?q=%3Cscript%3E%22%0A", key: T.supportKey)
            #expect(hostile.status == 404 && !hostile.errorMessage.contains("<script>\"\n"), "\(hostile.json)")
            for path in ["/v1/support/search", "/v1/support/search?q=", "/v1/support/search?q=\(String(repeating: "1", count: 129))"] {
                let answer = try await client.send(.get, path, key: T.supportKey)
                #expect(
                    answer.status == 400 && answer.errorCode == "invalid-parameter" && answer.errorMessage.contains("q"), "\(path): \(answer.json)")
            }
            let typo = try await client.send(.get, "/v1/support/search?query=alice", key: T.supportKey)
            #expect(typo.status == 400 && typo.errorCode == "unknown-parameter", "\(typo.json)")
        }
    }

    @Test("scopes: an app key cannot reach the support API, a support key cannot reach the app API or the admin routes; no key is a 401")
    func scopes() async throws {
        let testbed = try T(catalog: T.twoApps)
        try await testbed.withClient { client in
            for key in [T.appKey, T.otherAppKey] {
                for path in ["/v1/support/search?q=alice", "/v1/support/customers/alice"] {
                    let answer = try await client.send(.get, path, key: key)
                    #expect(answer.status == 403 && answer.errorCode == "wrong-scope", "\(path): \(answer.json)")
                    #expect(answer.errorMessage.contains("admin or support"), "\(answer.json)")
                }
            }
            for key in [T.supportKey, T.otherSupportKey] {
                for (method, path) in [
                    (HTTPRequest.Method.get, "/v1/customers/alice?bundleId=com.example.storekeeper"), (.get, "/v1/events"),
                    (.post, "/v1/customers/alice/app-account-token?bundleId=com.example.storekeeper"), (.get, "/v1/admin/webhooks"),
                    (.delete, "/v1/customers/alice?bundleId=com.example.storekeeper"), (.post, "/v1/admin/customers/alice/reconcile"),
                ] {
                    let answer = try await client.send(method, path, key: key)
                    #expect(answer.status == 403 && answer.errorCode == "wrong-scope", "\(method) \(path): \(answer.json)")
                    // Each route group named as what it is, with the keys it takes.
                    let expected =
                        path.hasPrefix("/v1/admin/")
                        ? "the admin API takes admin keys"
                        : path.hasPrefix("/v1/events") ? "the events API takes app or admin keys" : "the app API takes app or admin keys"
                    #expect(answer.errorMessage.hasPrefix(expected), "\(answer.json)")
                }
            }
            #expect(try await client.send(.get, "/v1/support/search?q=alice").status == 401)
        }
    }

    @Test("a customer's page: their state as a read answers it, their purchases, and their timeline of events with causes; only in the key's app")
    func customerPage() async throws {
        var testbed = try T(catalog: T.twoApps)
        let token = try await testbed.store.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        try testbed.engine.createCustomer(id: "apple-1")
        let bought = try testbed.engine.purchase(.init(customerId: "apple-1", productId: "pro.monthly", appAccountToken: token))
        try testbed.engine.advance(by: 31 * 86_400)
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        try await testbed.withClient { client in
            for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
            let page = try await client.send(.get, "/v1/support/customers/alice?bundleId=com.example.storekeeper", key: T.supportKey)
            #expect(page.status == 200, "\(page.json)")
            let read = try await client.send(.get, "/v1/customers/alice", key: T.appKey)
            #expect(NSDictionary(dictionary: read.json) == NSDictionary(dictionary: try #require(page.json["customer"] as? [String: Any])))
            let events = try #require(page.json["events"] as? [[String: Any]])
            #expect(events.compactMap { $0["type"] as? String }.prefix(2) == ["subscription.started", "subscription.renewed"], "\(events)")
            let sequences = events.compactMap { ($0["data"] as? [String: Any])?["sequence"] as? Int }
            #expect(sequences == Array(1...events.count), "oldest first, without gaps")
            #expect(events.allSatisfy { (($0["data"] as? [String: Any])?["cause"] as? [String: Any])?["kind"] as? String == "notification" })
            let purchases = try #require(page.json["purchases"] as? [[String: Any]])
            let transactions = purchases.compactMap { $0["transaction"] as? [String: Any] }
            #expect(transactions.count == 2 && transactions.allSatisfy { $0["originalTransactionId"] as? String == bought.originalTransactionId })
            #expect(transactions.first?["transactionId"] as? String == bought.transactionId, "oldest first")
            #expect(purchases.allSatisfy { ($0["source"] as? String)?.isEmpty == false })
            // The other app's support key: not alice's page, even when it names alice's app.
            for path in ["/v1/support/customers/alice", "/v1/support/customers/alice?bundleId=com.example.storekeeper"] {
                let answer = try await client.send(.get, path, key: T.otherSupportKey)
                #expect(answer.status == 404 && answer.errorCode == "unknown-customer", "\(path): \(answer.json)")
            }
            // An every-app key names the app; bad input is named.
            #expect(try await client.send(.get, "/v1/support/customers/alice", key: T.supportKey).errorCode == "bundle-id-required")
            #expect(try await client.send(.get, "/v1/support/customers/nobody?bundleId=com.example.storekeeper", key: T.supportKey).status == 404)
            #expect(
                try await client.send(.get, "/v1/support/customers/a%20b?bundleId=com.example.storekeeper", key: T.supportKey).errorCode
                    == "invalid-customer-id")
            #expect(
                try await client.send(.get, "/v1/support/customers/alice?bundleId=com.example.nope", key: T.supportKey).errorCode == "unknown-app")
        }
    }
}

@Suite("Storekeeper server: the support API's order-ID search, against the simulator's App Store Server API")
struct SupportOrderSearchTests {
    typealias T = RecoveryTestbed

    @Test(
        "an order ID from Apple's emailed receipt is looked up at Apple, verified and mapped to the customer; an unknown one is a 404; Apple failing is a 502 naming it"
    )
    func orderId() async throws {
        // Look Up Order ID exists in production only.
        try await T.serving(.production) { testbed, base in
            let bob = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-bob")
                return try engine.purchase(.init(customerId: "apple-bob", productId: "unlock.lifetime"))
            }
            #expect(try await T.submit(bob.signedTransaction, for: "bob", to: base) == 200)
            let orderId = try #require(await testbed.simulator.state.transactions[bob.transactionId]?.orderId)
            let search = base + "/v1/support/search?q="
            let found = try await T.call(.GET, search + orderId, key: T.supportKey)
            #expect(found.status == 200, "\(found.json)")
            let matches = try #require(found.json["matches"] as? [[String: Any]])
            #expect(matches.count == 1 && matches.first?["customerId"] as? String == "bob" && matches.first?["matchedBy"] as? String == "orderId")
            #expect(matches.first?["originalTransactionId"] as? String == bob.originalTransactionId)
            let unknown = try await T.call(.GET, search + "NOSUCHORDER1", key: T.supportKey)
            #expect(unknown.status == 404 && (unknown.json["error"] as? [String: Any])?["code"] as? String == "no-match", "\(unknown.json)")
            // The App Store failing every attempt: nothing in the ledger, so the failure is the answer.
            try await testbed.act { engine in
                var faults = engine.state.faults
                faults.failNextAPIRequests = 10
                engine.setFaults(faults)
            }
            let failing = try await T.call(.GET, search + orderId, key: T.supportKey)
            let error = failing.json["error"] as? [String: Any]
            #expect(failing.status == 502 && error?["code"] as? String == "order-lookup-failed", "\(failing.json)")
            #expect((error?["message"] as? String)?.contains("com.example.storekeeper") == true)
        }
    }
}

@Suite("Storekeeper server: support actions against the simulator's App Store Server API, audited")
struct SupportExtensionTests {
    typealias T = RecoveryTestbed

    static func error(_ answer: (status: Int, json: [String: Any])) -> (code: String?, message: String) {
        let error = answer.json["error"] as? [String: Any]
        return (error?["code"] as? String, error?["message"] as? String ?? "")
    }

    @Test(
        "extending a subscription: Apple's RENEWAL_EXTENDED arrives and the timeline shows the action and its effect; Storekeeper's own limits and Apple's refusals are named and audited"
    )
    func extend() async throws {
        try await T.serving(.sandbox) { testbed, base in
            let (bob, carol) = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-bob")
                try engine.createCustomer(id: "apple-carol")
                return (
                    try engine.purchase(.init(customerId: "apple-bob", productId: "pro.monthly")),
                    try engine.purchase(.init(customerId: "apple-carol", productId: "pro.monthly"))
                )
            }
            #expect(try await T.submit(bob.signedTransaction, for: "bob", to: base) == 200)
            #expect(try await T.submit(carol.signedTransaction, for: "carol", to: base) == 200)
            await testbed.deliverer.deliverDue()
            let before = try await T.call(.GET, base + "/v1/customers/bob", key: T.appKey)
            let expiresBefore = try #require((before.json["subscriptions"] as? [[String: Any]])?.first?["expiresDate"] as? Int)
            let extend = base + "/v1/support/customers/bob/subscriptions/\(bob.originalTransactionId)/extend"

            // Refused before anything is attempted: bad input, another customer's subscription, an app key.
            for (body, code) in [
                (#"{"days": 0, "reason": 3}"#, "invalid-parameter"), (#"{"days": 91, "reason": 3}"#, "invalid-parameter"),
                (#"{"days": 7, "reason": 9}"#, "invalid-parameter"), (#"{"days": 7}"#, "malformed-body"),
                (#"{"days": 7, "reason": 3, "reasn": 1}"#, "malformed-body"),
            ] {
                let answer = try await T.call(.POST, extend, key: T.supportKey, body: body)
                #expect(answer.status == 400 && Self.error(answer).code == code, "\(body): \(answer.json)")
            }
            let notTheirs = try await T.call(
                .POST, base + "/v1/support/customers/bob/subscriptions/\(carol.originalTransactionId)/extend", key: T.supportKey,
                body: #"{"days": 7, "reason": 3}"#)
            #expect(notTheirs.status == 404 && Self.error(notTheirs).code == "unknown-subscription", "\(notTheirs.json)")
            #expect(try await T.call(.POST, extend, key: T.appKey, body: #"{"days": 7, "reason": 3}"#).status == 403)

            // Extended: Apple answers, the audit says so, and RENEWAL_EXTENDED moves the expiry.
            let empty = try await T.call(.POST, extend, key: T.supportKey, body: "")
            #expect(empty.status == 400 && Self.error(empty).message.contains("the body is empty"), "\(empty.json)")
            let done = try await T.call(
                .POST, extend, key: T.supportKey, body: #"{"days": 7, "reason": 3, "note": "outage of 11-24\n\u202e<b>"}"#)
            #expect(done.status == 200, "\(done.json)")
            let action = try #require(done.json["action"] as? [String: Any])
            #expect(
                action["outcome"] as? String == "done" && action["keyName"] as? String == "support"
                    && action["target"] as? String == bob.originalTransactionId)
            // The note is kept escaped, as all untrusted text in a record is.
            #expect((action["request"] as? [String: Any])?["note"] as? String == "outage of 11-24\\n\\u{202E}<b>", "\(action)")
            #expect((action["detail"] as? [String: Any])?["success"] as? Bool == true)
            await testbed.deliverer.deliverDue()
            let after = try await T.call(.GET, base + "/v1/customers/bob", key: T.appKey)
            let expiresAfter = try #require((after.json["subscriptions"] as? [[String: Any]])?.first?["expiresDate"] as? Int)
            #expect(expiresAfter == expiresBefore + 7 * 86_400_000, "\(expiresBefore) → \(expiresAfter)")
            let page = try await T.call(.GET, base + "/v1/support/customers/bob", key: T.supportKey)
            let types = ((page.json["events"] as? [[String: Any]]) ?? []).compactMap { $0["type"] as? String }
            #expect(types.contains("subscription.renewal_extended"), "\(types)")
            let actions = try #require(page.json["actions"] as? [[String: Any]])
            #expect(actions.compactMap { $0["outcome"] as? String } == ["refused", "done"], "the probe of carol's subscription is recorded too")

            // A second is allowed (the path's ID percent-decoded); a third within 365 days is refused here, without
            // calling Apple, and audited.
            let first = String(format: "%%%02X", bob.originalTransactionId.utf8.first ?? 0)
            let encoded = base + "/v1/support/customers/bob/subscriptions/\(first)\(bob.originalTransactionId.dropFirst())/extend"
            #expect(try await T.call(.POST, encoded, key: T.supportKey, body: #"{"days": 1, "reason": 1}"#).status == 200)
            let third = try await T.call(.POST, extend, key: T.adminKey, body: #"{"days": 1, "reason": 1}"#)
            #expect(third.status == 409 && Self.error(third).code == "extension-refused", "\(third.json)")
            #expect(Self.error(third).message.contains("twice") || Self.error(third).message.contains("Apple allows 2"), "\(third.json)")

            // Apple's own refusal, named with its meaning: carol's subscription was extended twice at Apple already.
            try await testbed.act { (engine) throws(SimulatorError) in
                _ = try engine.extendRenewalDate(originalTransactionId: carol.originalTransactionId, days: 1)
                _ = try engine.extendRenewalDate(originalTransactionId: carol.originalTransactionId, days: 1)
            }
            let carolExtend = base + "/v1/support/customers/carol/subscriptions/\(carol.originalTransactionId)/extend"
            let refused = try await T.call(.POST, carolExtend, key: T.supportKey, body: #"{"days": 3, "reason": 2}"#)
            #expect(refused.status == 409 && Self.error(refused).code == "app-store-refused", "\(refused.json)")
            #expect(Self.error(refused).message.contains("SubscriptionMaxExtensionError (4030005)"), "\(refused.json)")

            // Apple failing: 502, audited as failed.
            try await testbed.act { engine in
                var faults = engine.state.faults
                faults.failNextAPIRequests = 10
                engine.setFaults(faults)
            }
            let failed = try await T.call(.POST, carolExtend, key: T.supportKey, body: #"{"days": 3, "reason": 2}"#)
            #expect(failed.status == 502 && Self.error(failed).code == "app-store-unavailable", "\(failed.json)")
            let carolPage = try await T.call(.GET, base + "/v1/support/customers/carol", key: T.supportKey)
            let carolActions = ((carolPage.json["actions"] as? [[String: Any]]) ?? []).compactMap { $0["outcome"] as? String }
            #expect(carolActions == ["refused", "failed"], "\(carolPage.json)")
            let bobActions =
                ((try await T.call(.GET, base + "/v1/support/customers/bob", key: T.supportKey).json["actions"] as? [[String: Any]]) ?? [])
            #expect(bobActions.compactMap { $0["outcome"] as? String } == ["refused", "done", "done", "refused"])
            #expect(bobActions.compactMap { $0["keyName"] as? String } == ["support", "support", "support", "admin"])
            // Erased, then met again under the same ID: a new identity, whose page shows none of the earlier actions.
            #expect(try await T.call(.DELETE, base + "/v1/customers/bob", key: T.adminKey).status == 200)
            #expect(try await T.call(.POST, base + "/v1/customers/bob/app-account-token", key: T.appKey).status == 200)
            let newBob = try await T.call(.GET, base + "/v1/support/customers/bob", key: T.supportKey)
            #expect(newBob.status == 200 && (newBob.json["actions"] as? [Any])?.isEmpty == true, "\(newBob.json)")
            // The log cannot be edited through the API: no route takes another method on it.
            for method in [HTTPMethod.PUT, .DELETE, .PATCH] {
                let answer = try await T.call(method, base + "/v1/support/customers/bob", key: T.adminKey)
                #expect(answer.status == 405, "\(method): \(answer.status) \(answer.json)")
            }
        }
    }

    @Test("a customer's refunds come from Apple's refund history, verified, for each of their purchases; an unknown customer is a 404")
    func refunds() async throws {
        try await T.serving(.sandbox) { testbed, base in
            let (unlock, monthly, coins) = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-dan")
                return (
                    try engine.purchase(.init(customerId: "apple-dan", productId: "unlock.lifetime")),
                    try engine.purchase(.init(customerId: "apple-dan", productId: "pro.monthly")),
                    // The same Apple account, signed in to the app as another customer.
                    try engine.purchase(.init(customerId: "apple-dan", productId: "coins.100"))
                )
            }
            #expect(try await T.submit(unlock.signedTransaction, for: "dan", to: base) == 200)
            #expect(try await T.submit(monthly.signedTransaction, for: "dan", to: base) == 200)
            #expect(try await T.submit(coins.signedTransaction, for: "eve", to: base) == 200)
            let none = try await T.call(.GET, base + "/v1/support/customers/dan/refunds", key: T.supportKey)
            #expect(none.status == 200 && (none.json["refunds"] as? [Any])?.isEmpty == true, "\(none.json)")
            #expect(none.json["purchasesChecked"] as? Int == 2)
            try await testbed.advance(by: 3_600)
            try await testbed.act { (engine) throws(SimulatorError) in
                try engine.refund(transactionId: unlock.transactionId)
                try engine.refund(transactionId: coins.transactionId)
            }
            let refunded = try await T.call(.GET, base + "/v1/support/customers/dan/refunds", key: T.supportKey)
            let refunds = try #require(refunded.json["refunds"] as? [[String: Any]], "\(refunded.json)")
            #expect(refunds.count == 1 && refunds.first?["transactionId"] as? String == unlock.transactionId)
            #expect(refunds.first?["revocationDate"] as? Int != nil)
            // Apple answers for the whole account: eve's refund is eve's, never shown on dan's page.
            let eve = try await T.call(.GET, base + "/v1/support/customers/eve/refunds", key: T.supportKey)
            #expect(((eve.json["refunds"] as? [[String: Any]]) ?? []).compactMap { $0["transactionId"] as? String } == [coins.transactionId])
            let unknown = try await T.call(.GET, base + "/v1/support/customers/nobody/refunds", key: T.supportKey)
            #expect(unknown.status == 404 && Self.error(unknown).code == "unknown-customer", "\(unknown.json)")
            #expect(try await T.call(.GET, base + "/v1/support/customers/dan/refunds", key: T.appKey).status == 403)
        }
    }

    @Test("an App Store that answers too slowly: the support routes answer within the response timeout, naming it, never an empty reply")
    func slowAppStore() async throws {
        try await T.serving(
            .production,
            configure: { configuration in
                // A response timeout of 12 s gives the App Store 6 s, and the route 6 s more to answer on a machine busy
                // with every suite (3 s was once not enough: the connection was cut at the timeout, an empty reply).
                configuration.http.responseTimeout = 12
            }
        ) { testbed, base in
            let fay = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-fay")
                return try engine.purchase(.init(customerId: "apple-fay", productId: "pro.monthly"))
            }
            #expect(try await T.submit(fay.signedTransaction, for: "fay", to: base) == 200)
            try await testbed.act { engine in
                var faults = engine.state.faults
                faults.apiLatencyMilliseconds = 20_000
                engine.setFaults(faults)
            }
            // Each answered after the App Store's share of the response timeout (6 s), before its 20 s: bounds
            // with room for a machine busy with every other suite.
            var started = ContinuousClock.now
            let search = try await T.call(.GET, base + "/v1/support/search?q=NOSUCHORDER2", key: T.supportKey)
            #expect(search.status == 502 && Self.error(search).message.contains("did not answer within 6 s"), "\(search.json)")
            #expect(ContinuousClock.now - started < .milliseconds(11_500), "\(ContinuousClock.now - started)")
            started = ContinuousClock.now
            let extend = try await T.call(
                .POST, base + "/v1/support/customers/fay/subscriptions/\(fay.originalTransactionId)/extend", key: T.supportKey,
                body: #"{"days": 2, "reason": 3}"#)
            #expect(extend.status == 502 && Self.error(extend).message.contains("may have been made"), "\(extend.json)")
            #expect(ContinuousClock.now - started < .milliseconds(11_500), "\(ContinuousClock.now - started)")
            started = ContinuousClock.now
            let refunds = try await T.call(.GET, base + "/v1/support/customers/fay/refunds", key: T.supportKey)
            #expect(refunds.status == 502 && Self.error(refunds).code == "app-store-unavailable", "\(refunds.json)")
            #expect(ContinuousClock.now - started < .milliseconds(11_500), "\(ContinuousClock.now - started)")
            // A lower-case customer ID is never sent to Apple, however slow it is: answered at once.
            let local = ContinuousClock.now
            #expect(try await T.call(.GET, base + "/v1/support/search?q=fay", key: T.supportKey).status == 200)
            #expect(ContinuousClock.now - local < .seconds(5), "not the App Store's 20 s")
        }
    }

    @Test(
        "a mass extension of a product: Apple extends every active subscriber, the audit log holds the app-wide action, and its progress is Apple's")
    func massExtension() async throws {
        try await T.serving(.sandbox) { testbed, base in
            let bought = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-gus")
                try engine.createCustomer(id: "apple-hal")
                return [
                    try engine.purchase(.init(customerId: "apple-gus", productId: "pro.monthly")),
                    try engine.purchase(.init(customerId: "apple-hal", productId: "pro.monthly")),
                ]
            }
            #expect(try await T.submit(bought[0].signedTransaction, for: "gus", to: base) == 200)
            #expect(try await T.submit(bought[1].signedTransaction, for: "hal", to: base) == 200)
            await testbed.deliverer.deliverDue()
            let mass = base + "/v1/support/mass-extensions"
            for (body, code) in [
                (#"{"productId": "pro.monthly", "days": 0, "reason": 3}"#, "invalid-parameter"),
                (#"{"productId": "pro.monthly", "days": 3, "reason": 3, "storefronts": []}"#, "invalid-parameter"),
                (#"{"productId": "pro.monthly", "days": 3, "reason": 3, "storefronts": ["usa"]}"#, "invalid-parameter"),
                (#"{"productId": "", "days": 3, "reason": 3}"#, "invalid-parameter"), (#"{"days": 3, "reason": 3}"#, "malformed-body"),
            ] {
                let answer = try await T.call(.POST, mass, key: T.supportKey, body: body)
                #expect(answer.status == 400 && Self.error(answer).code == code, "\(body): \(answer.json)")
            }
            #expect(try await T.call(.POST, mass, key: T.appKey, body: #"{"productId": "pro.monthly", "days": 3, "reason": 3}"#).status == 403)
            let started = try await T.call(
                .POST, mass, key: T.supportKey, body: #"{"productId": "pro.monthly", "days": 3, "reason": 3, "note": "outage"}"#)
            #expect(started.status == 200, "\(started.json)")
            let action = try #require(started.json["action"] as? [String: Any])
            #expect(
                action["customerId"] as? String == "*" && action["target"] as? String == "pro.monthly" && action["outcome"] as? String == "done")
            let identifier = try #require((action["detail"] as? [String: Any])?["requestIdentifier"] as? String)
            await testbed.deliverer.deliverDue()
            let status = try await T.call(.GET, mass + "/pro.monthly/\(identifier)", key: T.supportKey)
            #expect(
                status.status == 200 && status.json["complete"] as? Bool == true && status.json["succeededCount"] as? Int == 2, "\(status.json)")
            // The path percent-decoded, as every path value is; what Apple would refuse is the caller's mistake (400).
            #expect(try await T.call(.GET, mass + "/pro%2Emonthly/\(identifier)", key: T.supportKey).status == 200)
            let spaced = try await T.call(.GET, mass + "/pro.monthly/\(identifier)%20", key: T.supportKey)
            #expect(spaced.status == 400 && Self.error(spaced).code == "invalid-parameter", "\(spaced.json)")
            for customer in ["gus", "hal"] {
                let page = try await T.call(.GET, base + "/v1/support/customers/\(customer)", key: T.supportKey)
                let types = ((page.json["events"] as? [[String: Any]]) ?? []).compactMap { $0["type"] as? String }
                #expect(types.contains("subscription.renewal_extended"), "\(customer): \(types)")
                #expect((page.json["actions"] as? [Any])?.isEmpty == true, "an app-wide action is not one customer's")
            }
            let listed = try await T.call(.GET, mass, key: T.supportKey)
            #expect(((listed.json["actions"] as? [[String: Any]]) ?? []).count == 1, "\(listed.json)")
            let unknown = try await T.call(.GET, mass + "/pro.monthly/\(UUID().uuidString.lowercased())", key: T.supportKey)
            #expect(unknown.status == 404 && Self.error(unknown).code == "unknown-mass-extension", "\(unknown.json)")
        }
    }
}

extension RecoveryTestbed {
    /// The simulator served as the App Store Server API and a server with credentials for it (recovery off: only what
    /// the test does happens), for `body` with the server's base URL.
    static func serving(
        _ environment: AppStoreEnvironment, configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping (RecoveryTestbed, String) async throws -> Void
    ) async throws {
        let testbed = try await RecoveryTestbed(environment: environment)
        try await testbed.withSimulator { simulatorURL in
            var configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            configure(&configuration)
            try await testbed.withServer(configuration) { base in try await body(testbed, base) }
        }
    }
}
