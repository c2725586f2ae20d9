import AppStoreModels
import AppStoreSimulator
import Foundation
import HashTreeCollections
import Hummingbird
import HummingbirdTesting
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

@Suite("Storekeeper server: cached customer reads")
struct CustomerCacheServerTests {
    typealias T = ServerTestbed

    @Test("a cached answer is replaced as soon as a notification changes the customer, and when time ends an entitlement")
    func freshness() async throws {
        var testbed = try T()
        try testbed.engine.createCustomer(id: "alice")
        try testbed.engine.createCustomer(id: "bob")
        let alice = try testbed.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let bob = try testbed.engine.purchase(.init(customerId: "bob", productId: "unlock.lifetime"))
        try testbed.engine.setAutoRenew(originalTransactionId: alice.originalTransactionId, enabled: false)
        let autoRenewOff = try #require(testbed.engine.state.notifications.last).signedPayload
        let earlier = testbed.engine.state.notifications.dropLast().map(\.signedPayload)
        let expiry = try #require(testbed.engine.state.transactions[alice.transactionId]?.info.expiresDate)
        let clock = TestClock(testbed.engine.state.now)
        let uncached = ServerConfiguration.CustomerCacheSettings(capacity: 0)
        var plain = testbed.configuration
        plain.customerCache = uncached
        let reference = plain
        try await testbed.withClient(now: { clock.now }) { client in
            for (customer, jws) in [("alice", alice.signedTransaction), ("bob", bob.signedTransaction)] {
                let body = #"{"signedTransaction":"\#(jws)"}"#
                #expect(try await client.send(.post, "/v1/customers/\(customer)/transactions", body: body, key: T.appKey).status == 200)
            }
            for jws in earlier {
                #expect(try await client.send(.post, "/appstore/notifications", body: #"{"signedPayload":"\#(jws)"}"#).status == 200)
            }
            let first = try await client.send(.get, "/v1/customers/alice?environment=Sandbox", key: T.appKey)
            let second = try await client.send(.get, "/v1/customers/alice?environment=Sandbox", key: T.appKey)
            #expect(NSDictionary(dictionary: first.json) == NSDictionary(dictionary: second.json))
            #expect(Self.entitlement(first)?["willRenew"] as? Bool == true)
            _ = try await client.send(.get, "/v1/customers/bob?environment=Sandbox", key: T.appKey)

            // The notification turns auto-renew off: alice's next read says so, bob's answer is untouched.
            #expect(try await client.send(.post, "/appstore/notifications", body: #"{"signedPayload":"\#(autoRenewOff)"}"#).status == 200)
            let afterNotification = try await client.send(.get, "/v1/customers/alice?environment=Sandbox", key: T.appKey)
            #expect(Self.entitlement(afterNotification)?["willRenew"] as? Bool == false)
            _ = try await client.send(.get, "/v1/customers/bob?environment=Sandbox", key: T.appKey)

            // No EXPIRED notification yet: the passing of the expiry alone ends the entitlement.
            clock.set(expiry.addingTimeInterval(1))
            let afterExpiry = try await client.send(.get, "/v1/customers/alice?environment=Sandbox", key: T.appKey)
            #expect((afterExpiry.json["entitlements"] as? [Any])?.isEmpty == true, "\(afterExpiry.json)")

            let text = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            // Hits: alice's second read, bob's second read. Misses: the two submissions' answers, alice's first read,
            // bob's first read, alice after the notification, alice after expiry.
            #expect(text.contains(#"storekeeper_customer_cache_requests_total{result="hit"} 2"#), "\(text)")
            #expect(text.contains(#"storekeeper_customer_cache_requests_total{result="miss"} 6"#), "\(text)")
        }
        // The same store read without a cache gives the same answers.
        try await testbed.withClient(configuration: reference, now: { clock.now }) { client in
            let alice = try await client.send(.get, "/v1/customers/alice?environment=Sandbox", key: T.appKey)
            #expect((alice.json["entitlements"] as? [Any])?.isEmpty == true)
            let bob = try await client.send(.get, "/v1/customers/bob?environment=Sandbox", key: T.appKey)
            #expect((bob.json["nonConsumables"] as? [String]) == ["unlock.lifetime"])
        }
    }

    @Test(
        "reads racing notifications (customers linked by purchase and by app account token): once the writes are done, every answer equals a read without the cache"
    )
    func racingReads() async throws {
        var testbed = try T()
        var customers: [String] = []
        var submissions: [(String, String)] = []
        var originals: [String] = []
        for index in 0..<12 {
            let customer = "racer-\(index)"
            try testbed.engine.createCustomer(id: customer)
            customers.append(customer)
            if index.isMultiple(of: 2) {
                // Linked only through an app account token: the app submits coins bought with the token; the
                // subscription, bought with the same token, reaches the server by notification alone.
                let token = LowercaseUUID(UUID())
                let coins = try testbed.engine.purchase(.init(customerId: customer, productId: "coins.100", appAccountToken: token))
                submissions.append((customer, #"{"signedTransaction":"\#(coins.signedTransaction)"}"#))
                originals.append(
                    try testbed.engine.purchase(.init(customerId: customer, productId: "pro.monthly", appAccountToken: token)).originalTransactionId)
            } else {
                let purchase = try testbed.engine.purchase(.init(customerId: customer, productId: "pro.monthly"))
                submissions.append((customer, #"{"signedTransaction":"\#(purchase.signedTransaction)"}"#))
                originals.append(purchase.originalTransactionId)
            }
        }
        let subscribed = testbed.engine.state.notifications.map { #"{"signedPayload":"\#($0.signedPayload)"}"# }
        for enabled in [false, true, false] {
            for original in originals { try testbed.engine.setAutoRenew(originalTransactionId: original, enabled: enabled) }
        }
        let changes = testbed.engine.state.notifications.dropFirst(subscribed.count).map { #"{"signedPayload":"\#($0.signedPayload)"}"# }
        let readers = customers
        let bodies = submissions
        let cached = Answers()
        try await testbed.withClient { client in
            for (customer, body) in bodies {
                #expect(try await client.send(.post, "/v1/customers/\(customer)/transactions", body: body, key: T.appKey).status == 200)
            }
            for body in subscribed { #expect(try await client.send(.post, "/appstore/notifications", body: body).status == 200) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for body in changes {
                        let status = try await client.send(.post, "/appstore/notifications", body: body).status
                        #expect(status == 200)
                    }
                }
                for _ in 0..<4 {
                    group.addTask {
                        for _ in 0..<20 {
                            for customer in readers.shuffled() {
                                _ = try await client.send(.get, "/v1/customers/\(customer)?environment=Sandbox", key: T.appKey)
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            for customer in readers {
                cached.set(customer, try await client.send(.get, "/v1/customers/\(customer)?environment=Sandbox", key: T.appKey).json)
            }
        }
        var plain = testbed.configuration
        plain.customerCache = .init(capacity: 0)
        try await testbed.withClient(configuration: plain) { client in
            for customer in readers {
                let fresh = try await client.send(.get, "/v1/customers/\(customer)?environment=Sandbox", key: T.appKey)
                #expect(Self.entitlement(fresh)?["willRenew"] as? Bool == false)
                #expect(NSDictionary(dictionary: fresh.json) == NSDictionary(dictionary: cached.get(customer)), "\(customer)")
            }
        }
    }

    /// Answers by customer, shared between tasks.
    final class Answers: Sendable {
        private let answers = Mutex<[String: [String: any Sendable]]>([:])
        func set(_ customer: String, _ json: [String: any Sendable]) { answers.withLock { $0[customer] = json } }
        func get(_ customer: String) -> [String: any Sendable] { answers.withLock { $0[customer] ?? [:] } }
    }

    static func entitlement(_ answer: Answer) -> [String: Any]? {
        (answer.json["entitlements"] as? [[String: Any]])?.first { $0["entitlement"] as? String == "pro" }
    }

    @Test("the cache settings are checked")
    func settings() throws {
        var configuration = try T().configuration
        configuration.customerCache = .init(capacity: -1)
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.customerCache = .init(capacity: 10, maxAgeSeconds: 0)
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.customerCache = .init(capacity: 0, maxAgeSeconds: 5)
        try configuration.validate()
    }
}
