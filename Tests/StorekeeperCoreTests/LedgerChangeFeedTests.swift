import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Synchronization
import Testing

/// The change feed is what lets a read cache be exact: after each committed write, every customer whose view of
/// the ledger changed must be among the customers announced. And the engine's `nextChange` must bound how long a
/// computed state stays true as time passes.
@Suite("Ledger stores: change feed and state validity", .dropsTestDatabases)
struct LedgerChangeFeedTests {
    typealias H = SimulatorFixture

    /// One write to a store.
    enum Write {
        case notification(VerifiedNotification)
        case submission(VerifiedSignedData<TransactionInfo>, String)

        func apply(to store: any LedgerStore) async throws {
            switch self {
            case .notification(let notification): _ = try await store.apply(notification)
            case .submission(let transaction, let customer): _ = try await store.submit(transaction, customerId: customer)
            }
        }

        var date: Date? {
            switch self {
            case .notification(let notification): notification.payload.signedDate
            case .submission(let transaction, _): transaction.payload.signedDate
            }
        }
    }

    /// Collects what a store announces.
    final class Announcements: Sendable {
        private let sets = Mutex<[Set<String>]>([])
        func add(_ customers: Set<String>) { sets.withLock { $0.append(customers) } }
        func drain() -> Set<String> {
            sets.withLock { sets in
                defer { sets = [] }
                return sets.reduce([], { $0.union($1) })
            }
        }
    }

    /// Applies the writes one by one; after each, every customer whose ledger (or computed state) changed must have
    /// been announced, and each customer's state must hold until its `nextChange`.
    /// Returns how many times a customer's ledger changed, and the store.
    @discardableResult
    static func check(
        _ writes: [Write], customers: [String], backend: Backend, until end: Date
    ) async throws -> (changes: Int, store: any LedgerStore) {
        let store = try await backend.makeStore()
        let announcements = Announcements()
        store.changes.subscribe { change in
            switch change {
            case .customers(let customers): announcements.add(customers)
            case .everyone: announcements.add(Set(customers))
            }
        }
        let engine = EntitlementEngine(configuration: H.entitlements)
        var views: [String: Ledger] = [:]
        for customer in customers {
            views[customer] = try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
        }
        var changes = 0
        for (index, write) in writes.enumerated() {
            try await write.apply(to: store)
            let announced = announcements.drain()
            let at = write.date ?? end
            for customer in customers {
                let view = try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                if view != views[customer] {
                    changes += 1
                    #expect(
                        announced.contains(customer), "write \(index): \(customer) changed but was not announced (announced \(announced.sorted()))")
                }
                views[customer] = view
                try checkValidity(engine, customer, view, at: at)
                // The reduced ledger for reads decides the same state, and the same next change.
                let reduced = try await store.entitlementLedger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                #expect(
                    engine.state(of: customer, in: reduced, environment: .sandbox, at: at)
                        == engine.state(of: customer, in: view, environment: .sandbox, at: at),
                    "write \(index): \(customer)'s state differs between the entitlement ledger and the whole ledger"
                )
                #expect(
                    engine.nextChange(of: customer, in: reduced, environment: .sandbox, after: at)
                        == engine.nextChange(of: customer, in: view, environment: .sandbox, after: at),
                    "write \(index): \(customer)'s next change differs"
                )
            }
        }
        return (changes, store)
    }

    /// The state at `at` is the state at every sampled moment before `nextChange`, which comes no later than any
    /// expiry ahead.
    static func checkValidity(_ engine: EntitlementEngine, _ customer: String, _ ledger: Ledger, at: Date) throws {
        let state = engine.state(of: customer, in: ledger, environment: .sandbox, at: at)
        let next = engine.nextChange(of: customer, in: ledger, environment: .sandbox, after: at)
        for entitlement in state.entitlements {
            if let expiry = entitlement.expiresDate, expiry > at {
                #expect(
                    next != nil && next! <= expiry, "\(customer): \(entitlement.productId) expires \(expiry), next change \(String(describing: next))"
                )
            }
        }
        let horizon = next ?? at.addingTimeInterval(400 * 86_400)
        let span = horizon.timeIntervalSince(at)
        for fraction in [0.000_001, 0.25, 0.5, 0.75, 0.999_999] {
            let moment = at.addingTimeInterval(span * fraction)
            let later = engine.state(of: customer, in: ledger, environment: .sandbox, at: moment)
            #expect(later == state, "\(customer): state changed at \(moment), before the next change \(String(describing: next))")
        }
    }

    static func writes(of harness: H) async throws -> (notifications: [Write], submissions: [Write]) {
        let notifications = try await harness.verifiedNotifications().map(Write.notification)
        let submissions = try await harness.appSubmissions().map { Write.submission($0.0, $0.1) }
        return (notifications, submissions)
    }

    @Test(
        "every change a write makes to a customer's ledger is announced (shipped scenarios, both orders)", arguments: Backend.available,
        ShippedScenarios.all.map(\.name))
    func scenarios(backend: Backend, name: String) async throws {
        var harness = H()
        try await harness.play(name)
        let (notifications, submissions) = try await Self.writes(of: harness)
        let customers = harness.engine.groundTruth().map(\.customerId) + ["nobody"]
        let end = harness.engine.state.now
        let late = try await Self.check(notifications + submissions + notifications.reversed(), customers: customers, backend: backend, until: end)
            .changes
        let early = try await Self.check(submissions + notifications, customers: customers, backend: backend, until: end).changes
        #expect(late > 0 && early > 0, "the scenario changed no customer's view")
    }

    @Test("customers linked only by an app account token are announced, and both owners when a token changes hands", arguments: Backend.available)
    func tokens(backend: Backend) async throws {
        var harness = H()
        let token = LowercaseUUID(UUID())
        for customer in ["tina", "ursula"] { try harness.engine.createCustomer(id: customer) }
        let coins = try harness.engine.purchase(.init(customerId: "tina", productId: "coins.100", appAccountToken: token))
        let consumedBefore = harness.engine.state.notifications.count
        _ = try harness.engine.purchase(.init(customerId: "tina", productId: "pro.monthly", appAccountToken: token))
        try harness.engine.advance(by: 40 * 86_400)
        let unlock = try harness.engine.purchase(.init(customerId: "ursula", productId: "unlock.lifetime", appAccountToken: token))
        let verifier = harness.verifier
        let verify = { (jws: String) in try await verifier.verifyTransaction(jws) }
        let notifications = try await harness.verifiedNotifications().dropFirst(consumedBefore).map(Write.notification)
        // tina's app submits the coins (claiming the token); the subscription arrives only by notification, linked
        // by the token; then ursula's app submits a purchase with the same token, which moves it to her.
        let writes =
            [Write.submission(try await verify(coins.signedTransaction), "tina")] + notifications
            + [Write.submission(try await verify(unlock.signedTransaction), "ursula")]
        let changes = try await Self.check(writes, customers: ["tina", "ursula"], backend: backend, until: harness.engine.state.now).changes
        #expect(changes >= 3)
    }

    @Test("a notification carrying only renewal info announces the customer of its subscription", arguments: Backend.available)
    func renewalInfoOnly(backend: Backend) async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        try harness.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: false)
        let notifications = try await harness.verifiedNotifications()
        // The auto-renew change, signed again without its transaction (Apple's data may carry either).
        var payload = try #require(notifications.last).payload
        payload.notificationUUID = UUID().uuidString
        payload.data?.signedTransactionInfo = nil
        let renewalOnly = try await harness.verifier.verifyNotification(try TestAppStore.authority.makeSigner().sign(payload))
        #expect(renewalOnly.transaction == nil && renewalOnly.renewalInfo != nil)
        let submission = Write.submission(try await harness.verifier.verifyTransaction(purchase.signedTransaction), "alice")
        let writes = [submission, .notification(notifications[0]), .notification(renewalOnly)]
        let changes = try await Self.check(writes, customers: ["alice"], backend: backend, until: harness.engine.state.now).changes
        #expect(changes == 3)
    }

    @Test("a subscription whose latest transaction no longer carries the customer's token stays theirs", arguments: Backend.available)
    func tokenOnOlderTransactionsOnly(backend: Backend) async throws {
        var harness = H()
        let token = LowercaseUUID(UUID())
        try harness.engine.createCustomer(id: "tina")
        let coins = try harness.engine.purchase(.init(customerId: "tina", productId: "coins.100", appAccountToken: token))
        let consumed = harness.engine.state.notifications.count
        let pro = try harness.engine.purchase(.init(customerId: "tina", productId: "pro.monthly", appAccountToken: token))
        // The developer's server replaces the subscription's token (Set App Account Token): renewals carry the new one.
        try harness.engine.setAppAccountToken(originalTransactionId: pro.originalTransactionId, token: LowercaseUUID(UUID()))
        try harness.engine.advance(by: 35 * 86_400)
        let notifications = try await harness.verifiedNotifications().dropFirst(consumed).map(Write.notification)
        let writes = [Write.submission(try await harness.verifier.verifyTransaction(coins.signedTransaction), "tina")] + notifications
        let store = try await Self.check(writes, customers: ["tina"], backend: backend, until: harness.engine.state.now).store
        let engine = EntitlementEngine(configuration: H.entitlements)
        let reduced = try await store.entitlementLedger(for: "tina", bundleId: "com.example.storekeeper", environment: .sandbox)
        let state = engine.state(of: "tina", in: reduced, environment: .sandbox, at: harness.engine.state.now)
        #expect(state.entitledProductIds == ["pro.monthly"], "\(state.entitledProductIds)")
        #expect(reduced.transactions.values.filter { $0.info.productId == "pro.monthly" }.count == 1)
        #expect(reduced.omittedTransactionTokens.values.contains { $0.contains(token) })
    }
}
