import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import HashTreeCollections
import StorekeeperCore
import StorekeeperTesting
import Testing

@Suite("Ledger and entitlements against the simulator's ground truth")
struct LedgerTests {
    typealias H = SimulatorFixture

    @Test("every shipped scenario: the ledger's entitlements equal the simulator's ground truth", arguments: ShippedScenarios.all.map(\.name))
    func scenarios(name: String) async throws {
        var harness = H()
        try await harness.play(name)
        var ledger = Ledger()
        try harness.linkCustomers(in: &ledger)
        for notification in try await harness.verifiedNotifications() { ledger.apply(notification) }
        let engine = EntitlementEngine(configuration: H.entitlements)
        for truth in harness.engine.groundTruth() {
            let state = engine.state(of: truth.customerId, in: ledger, environment: .sandbox, at: harness.engine.state.now)
            #expect(state.entitledProductIds == truth.entitlements.map(\.productId).sorted(), "\(name): \(truth.customerId)")
            #expect(state.consumableBalance == truth.consumableBalance, "\(name): \(truth.customerId)")
        }
    }

    @Test("every permutation of a 6-notification history, each delivered twice, gives the same ledger")
    func permutations() async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        try harness.engine.advance(by: 31 * 86_400)
        try harness.engine.setBilling(customerId: "alice", works: false)
        try harness.engine.advance(by: 31 * 86_400)
        try harness.engine.setBilling(customerId: "alice", works: true)
        try harness.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: false)
        try harness.engine.advance(by: 40 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        #expect(
            notifications.map(\.payload.notificationType) == [.subscribed, .didRenew, .didFailToRenew, .didRenew, .didChangeRenewalStatus, .expired])

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
        var harness = H()
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
        let engine = EntitlementEngine(configuration: H.entitlements)
        #expect(engine.state(of: "alice", in: ledger, environment: .sandbox, at: TestAppStore.start).entitledProductIds == ["unlock.lifetime"])
        #expect(engine.state(of: "alice", in: ledger, environment: .production, at: TestAppStore.start).entitlements.isEmpty)
    }

    @Test("an older version never replaces a newer one: a late REFUND after REFUND_REVERSED keeps the reversal")
    func olderNeverOverwrites() async throws {
        var harness = H()
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
        let engine = EntitlementEngine(configuration: H.entitlements)
        #expect(engine.state(of: "alice", in: ledger, environment: .sandbox, at: harness.engine.state.now).entitledProductIds == ["unlock.lifetime"])
    }

    @Test("entitlement names come from the product mapping, with the transaction and notification behind each")
    func mapping() async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        var ledger = Ledger()
        try harness.linkCustomers(in: &ledger)
        let notification = try #require(try await harness.verifiedNotifications().first)
        ledger.apply(notification)
        var configuration = H.entitlements
        configuration.productEntitlements = ["pro.monthly": ["pro", "no-ads"]]
        let state = EntitlementEngine(configuration: configuration).state(of: "alice", in: ledger, environment: .sandbox, at: TestAppStore.start)
        #expect(state.entitlements.map(\.entitlement) == ["no-ads", "pro"])
        #expect(state.entitlements.allSatisfy { $0.source == notification.payload.notificationUUID && $0.willRenew == true })
        let later = EntitlementEngine(configuration: configuration).state(
            of: "alice", in: ledger, environment: .sandbox, at: TestAppStore.start.addingTimeInterval(40 * 86_400))
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
