import AppStoreModels
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperTesting
import Testing

@Suite("Ledger stores: app account tokens the server issues", .dropsTestDatabases)
struct IssuedTokenTests {
    static let app = "com.example.storekeeper"

    @Test("a customer's token is the same on every call until renewed; each customer, app and environment has its own", arguments: Backend.available)
    func sameUntilRenewed(backend: Backend) async throws {
        let store = try await backend.makeStore()
        #expect(try await !store.customerExists("alice", bundleId: Self.app, environment: .sandbox))
        let first = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: false)
        #expect(try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: false) == first)
        #expect(try await store.customerExists("alice", bundleId: Self.app, environment: .sandbox), "a customer with a token is known")
        let bob = try await store.appAccountToken(for: "bob", bundleId: Self.app, environment: .sandbox, renew: false)
        let production = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .production, renew: false)
        #expect(Set([first, bob, production]).count == 3)
        let renewed = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: true)
        #expect(renewed != first)
        #expect(try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: false) == renewed)
        await store.close()
    }

    @Test("a purchase made with an issued token is the customer's from its notification alone, with either token", arguments: Backend.available)
    func purchaseByNotificationAlone(backend: Backend) async throws {
        let store = try await backend.makeStore()
        let first = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: false)
        let renewed = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: true)
        var fixture = SimulatorFixture()
        // The App Store's customer is another name: only the token ties the purchases to the server's customer.
        try fixture.customer("apple-account-1")
        _ = try fixture.engine.purchase(.init(customerId: "apple-account-1", productId: "pro.monthly", appAccountToken: first))
        _ = try fixture.engine.purchase(.init(customerId: "apple-account-1", productId: "unlock.lifetime", appAccountToken: renewed))
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        let ledger = try await store.ledger(for: "alice", bundleId: Self.app, environment: .sandbox)
        let state = EntitlementEngine(configuration: SimulatorFixture.entitlements).state(
            of: "alice", in: ledger, environment: .sandbox, at: fixture.engine.state.now)
        #expect(state.entitledProductIds == ["pro.monthly", "unlock.lifetime"], "\(state.entitledProductIds)")
        await store.close()
    }

    @Test("two instances issuing a token for one customer at once agree on one", .needsPostgres, .dropsTestDatabases)
    func instancesAgree() async throws {
        let url = try await PostgresTestDatabase.create()
        let one = try await PostgresLedgerStore.open(url)
        let two = try await PostgresLedgerStore.open(url)
        for round in 0..<10 {
            let customer = "racer-\(round)"
            async let a = one.appAccountToken(for: customer, bundleId: Self.app, environment: .sandbox, renew: false)
            async let b = two.appAccountToken(for: customer, bundleId: Self.app, environment: .sandbox, renew: false)
            let (first, second) = try await (a, b)
            #expect(first == second, "\(customer): \(first) and \(second)")
        }
        await one.close()
        await two.close()
    }
}
