import AppStoreModels
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

@Suite("Support search: customers by any ID support is given, on both backends")
struct SupportSearchTests {
    @Test("by customer ID, transaction ID, original transaction ID and app account token; only in the apps searched", arguments: Backend.available)
    func search(backend: Backend) async throws {
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        var fixture = SimulatorFixture()
        let bought = try await OutboxTests.buy("alice", "pro.monthly", in: store, &fixture)
        try await OutboxTests.buy("bob", "coins.100", in: store, &fixture)
        let waiting = try await store.appAccountToken(for: "carol", bundleId: OutboxTests.app, environment: .sandbox, renew: false)
        try fixture.engine.advance(by: 31 * 86_400)
        _ = try await store.applyRecovered(try await fixture.verifiedNotifications(), watermark: nil)
        let renewal = try #require(
            fixture.engine.state.transactions.values.map(\.info).filter { $0.originalTransactionId == bought.originalTransactionId }
                .max { $0.purchaseDate < $1.purchaseDate })
        #expect(renewal.transactionId != bought.originalTransactionId)
        let token = try #require(renewal.appAccountToken)
        let search = SupportSearch(store: store, apps: [VerifierKey(bundleId: OutboxTests.app, environment: .sandbox)])
        func found(_ text: String) async throws -> [String] {
            try await search.search(text).map { "\($0.customerId) \($0.matchedBy) \($0.originalTransactionId ?? "-")" }
        }
        let family = bought.originalTransactionId
        #expect(try await found("alice") == ["alice customerId -"])
        #expect(try await found(renewal.transactionId) == ["alice transactionId \(family)"])
        #expect(try await found(family) == ["alice originalTransactionId \(family)", "alice transactionId \(family)"])
        #expect(try await found(token.description) == ["alice appAccountToken \(family)"])
        #expect(try await found(waiting.description) == ["carol appAccountToken -"], "a token issued, no purchase yet")
        #expect(try await found("bob").count == 1)
        #expect(try await found("2000000000999999").isEmpty)
        #expect(try await found(UUID().uuidString).isEmpty)
        // Another app, or another environment: nothing.
        for app in [
            VerifierKey(bundleId: "com.example.other", environment: .sandbox), VerifierKey(bundleId: OutboxTests.app, environment: .production),
        ] {
            let elsewhere = SupportSearch(store: store, apps: [app])
            for text in ["alice", renewal.transactionId, family, token.description, waiting.description] {
                #expect(try await elsewhere.search(text).isEmpty, "\(app): \(text)")
            }
        }
        await store.close()
    }
}
