import AppStoreModels
import AppStoreSimulator
import Foundation
import HashTreeCollections
import Hummingbird
import HummingbirdTesting
import StorekeeperServer
import Synchronization
import Testing

@Suite("Storekeeper server: cached customer reads")
struct CustomerCacheServerTests {
    typealias T = ServerTestbed

    /// A clock the test moves.
    final class TestClock: Sendable {
        private let date: Mutex<Date>
        init(_ date: Date) { self.date = Mutex(date) }
        var now: Date { date.withLock { $0 } }
        func set(_ new: Date) { date.withLock { $0 = new } }
    }

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
        let metrics = ServerMetrics()
        let uncached = ServerConfiguration.CustomerCacheSettings(capacity: 0)
        var plain = testbed.configuration
        plain.customerCache = uncached
        let reference = plain
        try await testbed.withClient(metrics: metrics, now: { clock.now }) { client in
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
