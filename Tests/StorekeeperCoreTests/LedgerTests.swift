import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import HashTreeCollections
import StorekeeperCore
import Testing

/// Plays simulator scenarios, verifies every notification as the server will, and applies them to a ledger.
struct LedgerHarness {
    static let start = Date(timeIntervalSince1970: 1_780_000_000)
    static let authority: TestCertificateAuthority = {
        var options = TestCertificateAuthority.Options()
        options.validity = Date(timeIntervalSince1970: 1_577_836_800)...Date(timeIntervalSince1970: 2_208_988_800)
        return try! TestCertificateAuthority.generate(options: options)
    }()

    static let configuration: EntitlementConfiguration = {
        var levels: [String: Int] = [:]
        for product in Catalog.sample.products where product.level != nil { levels[product.productId] = product.level }
        return EntitlementConfiguration(
            subscriptionLevels: levels, nonRenewingDurations: ["season.pass": 89 * 86_400]
        )
    }()

    var engine: LifecycleEngine
    let verifier: SignedDataVerifier

    init(environment: AppStoreEnvironment = .sandbox) throws {
        engine = try LifecycleEngine(
            catalog: .sample, state: SimulatorState(environment: environment, renewalRate: .realTime, now: Self.start),
            signer: try Self.authority.makeSigner()
        )
        verifier = SignedDataVerifier(configuration: try .init(
            bundleID: "com.example.storekeeper", appAppleID: 6_450_000_001, environment: environment,
            trustedRoots: [Self.authority.rootCertificate]
        ))
    }

    /// A harness in which each of `customers` has bought the monthly plan (one purchase notification each, in order).
    static func monthlySubscribers(_ customers: [String]) throws -> LedgerHarness {
        var harness = try LedgerHarness()
        for customer in customers {
            try harness.engine.createCustomer(id: customer)
            _ = try harness.engine.purchase(.init(customerId: customer, productId: "pro.monthly"))
        }
        return harness
    }

    mutating func play(_ name: String) async throws {
        let simulator = Simulator(engine: engine)
        try await ScenarioRunner(simulator: simulator).run(try #require(try ShippedScenarios.named(name)))
        engine = await simulator.engine
    }

    /// Every notification so far, verified.
    func verifiedNotifications() async throws -> [VerifiedNotification] {
        var result: [VerifiedNotification] = []
        for record in engine.state.notifications {
            result.append(try await verifier.verifyNotification(record.signedPayload))
        }
        return result
    }

    /// What each customer's app would have submitted: their transactions, linked to them.
    func linkCustomers(in ledger: inout Ledger) throws {
        for record in engine.state.transactions.values {
            try ledger.link(record.info, to: record.customerId)
        }
    }
}

@Suite("Ledger and entitlements against the simulator's ground truth")
struct LedgerTests {
    typealias H = LedgerHarness

    @Test("every shipped scenario: the ledger's entitlements equal the simulator's ground truth", arguments: ShippedScenarios.all.map(\.name))
    func scenarios(name: String) async throws {
        var harness = try H()
        try await harness.play(name)
        var ledger = Ledger()
        try harness.linkCustomers(in: &ledger)
        for notification in try await harness.verifiedNotifications() { ledger.apply(notification) }
        let engine = EntitlementEngine(configuration: H.configuration)
        for truth in harness.engine.groundTruth() {
            let state = engine.state(of: truth.customerId, in: ledger, environment: .sandbox, at: harness.engine.state.now)
            #expect(state.entitledProductIds == truth.entitlements.map(\.productId).sorted(), "\(name): \(truth.customerId)")
            #expect(state.consumableBalance == truth.consumableBalance, "\(name): \(truth.customerId)")
        }
    }

    @Test("every permutation of a 6-notification history, each delivered twice, gives the same ledger")
    func permutations() async throws {
        var harness = try H()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        try harness.engine.advance(by: 31 * 86_400)
        try harness.engine.setBilling(customerId: "alice", works: false)
        try harness.engine.advance(by: 31 * 86_400)
        try harness.engine.setBilling(customerId: "alice", works: true)
        try harness.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: false)
        try harness.engine.advance(by: 40 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        #expect(notifications.map(\.payload.notificationType) == [.subscribed, .didRenew, .didFailToRenew, .didRenew, .didChangeRenewalStatus, .expired])

        var reference = Ledger()
        for notification in notifications { reference.apply(notification) }
        var count = 0
        for order in Self.permutations(of: Array(notifications.indices)) {
            var ledger = Ledger()
            for index in order + order.reversed() { ledger.apply(notifications[index]) }
            #expect(ledger == reference, "order \(order)")
            count += 1
        }
        #expect(count == 720)
        #expect(reference.notifications.count == 6)
        let key = LedgerKey(.sandbox, purchase.originalTransactionId)
        #expect(reference.subscriptions[key]?.status == .expired)
        #expect(reference.subscriptions[key]?.renewalInfo?.autoRenewStatus == .off)
    }

    @Test("a duplicate notification is acknowledged and changes nothing; sandbox never grants production")
    func duplicatesAndEnvironments() async throws {
        var harness = try H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "unlock.lifetime"))
        let notification = try #require(try await harness.verifiedNotifications().first)
        var ledger = Ledger()
        try harness.linkCustomers(in: &ledger)
        let first = ledger.apply(notification)
        #expect(first)
        let before = ledger
        let again = ledger.apply(notification)
        #expect(!again)
        #expect(ledger == before)
        let engine = EntitlementEngine(configuration: H.configuration)
        #expect(engine.state(of: "alice", in: ledger, environment: .sandbox, at: H.start).entitledProductIds == ["unlock.lifetime"])
        #expect(engine.state(of: "alice", in: ledger, environment: .production, at: H.start).entitlements.isEmpty)
    }

    @Test("an older version never replaces a newer one: a late REFUND after REFUND_REVERSED keeps the reversal")
    func olderNeverOverwrites() async throws {
        var harness = try H()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "unlock.lifetime"))
        try harness.engine.advance(by: 60)
        try harness.engine.refund(transactionId: purchase.transactionId)
        try harness.engine.advance(by: 60)
        try harness.engine.reverseRefund(transactionId: purchase.transactionId)
        let notifications = try await harness.verifiedNotifications()
        var ledger = Ledger()
        try harness.linkCustomers(in: &ledger)
        ledger.apply(notifications[2])  // REFUND_REVERSED first
        ledger.apply(notifications[1])  // the older REFUND arrives late
        ledger.apply(notifications[0])
        let kept = try #require(ledger.transactions[LedgerKey(.sandbox, purchase.transactionId)])
        #expect(kept.info.revocationDate == nil)
        #expect(kept.source == notifications[2].payload.notificationUUID)
        let engine = EntitlementEngine(configuration: H.configuration)
        #expect(engine.state(of: "alice", in: ledger, environment: .sandbox, at: harness.engine.state.now).entitledProductIds == ["unlock.lifetime"])
    }

    @Test("entitlement names come from the product mapping, with the transaction and notification behind each")
    func mapping() async throws {
        var harness = try H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        var ledger = Ledger()
        try harness.linkCustomers(in: &ledger)
        let notification = try #require(try await harness.verifiedNotifications().first)
        ledger.apply(notification)
        var configuration = H.configuration
        configuration.productEntitlements = ["pro.monthly": ["pro", "no-ads"]]
        let state = EntitlementEngine(configuration: configuration).state(of: "alice", in: ledger, environment: .sandbox, at: H.start)
        #expect(state.entitlements.map(\.entitlement) == ["no-ads", "pro"])
        #expect(state.entitlements.allSatisfy { $0.source == notification.payload.notificationUUID && $0.willRenew == true })
        let later = EntitlementEngine(configuration: configuration).state(of: "alice", in: ledger, environment: .sandbox, at: H.start.addingTimeInterval(40 * 86_400))
        #expect(later.entitlements.isEmpty)  // the period ended and no renewal arrived
    }

    static func permutations(of items: [Int]) -> [[Int]] {
        guard items.count > 1 else { return [items] }
        return items.indices.flatMap { index -> [[Int]] in
            var rest = items
            let first = rest.remove(at: index)
            return permutations(of: rest).map { [first] + $0 }
        }
    }
}
