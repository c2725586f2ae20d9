import AppStoreModels
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

/// What the outbox records of each customer between writes: the sequence of their last event, a digest of their state
/// (the event holds the JSON) and when it next changes by itself; and what a write or the expiry job decides from it.
@Suite("The outbox's record of a customer: a digest of their state", .dropsTestDatabases)
struct OutboxRecordTests {
    static let app = "com.example.storekeeper"
    static let alice = CustomerKey(bundleId: app, environment: .sandbox, customerId: "alice")

    /// Alice bought the monthly plan and turned auto-renew off: her ledger in the app, and her recorded state as the
    /// outbox made it when she bought.
    static func lapsingSubscriber() async throws -> (ledger: Ledger, record: CustomerStateRecord, answer: CustomerAnswer) {
        let store = try await Backend.sqlite.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        var fixture = SimulatorFixture()
        let bought = try await OutboxTests.buy("alice", "pro.monthly", in: store, &fixture)
        try fixture.engine.setAutoRenew(originalTransactionId: bought.originalTransactionId, enabled: false)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        var ledger = try await store.ledger(for: "alice", bundleId: app, environment: .sandbox)
        ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == app }
        let answer = CustomerAnswer(
            for: "alice", in: ledger, bundleId: app, environment: .sandbox, configuration: SimulatorFixture.entitlements, at: TestAppStore.start)
        let events = try await OutboxTests.allEvents(store)
        await store.close()
        let last = try #require(events.last)
        #expect(last.draft.state == answer.jsonText, "the last event holds the state")
        return (ledger, CustomerStateRecord(customer: alice, sequence: last.draft.sequence, state: "", validUntil: answer.validUntil), answer)
    }

    @Test("the record holds a SHA-256 digest of the state, not the state again; it recognises that state and no other")
    func digest() async throws {
        let (ledger, record, answer) = try await Self.lapsingSubscriber()
        let (drafts, recorded) = EventDerivation.derive(
            .init(customer: Self.alice, stored: nil, ledgers: [Ledger(), ledger], causes: [EventCause(.api)]),
            configuration: SimulatorFixture.entitlements, at: TestAppStore.start)
        #expect(!drafts.isEmpty)
        let made = try #require(recorded)
        #expect(made.state == CustomerStateRecord.digest(of: answer.jsonText))
        #expect(made.state.hasPrefix("sha256:") && made.state.count == 39, "\(made.state)")
        #expect(made.validUntil == answer.validUntil && made.sequence == Int64(drafts.count))
        #expect(made.records(answer.jsonText))
        #expect(!made.records(answer.jsonText + " "))
        // A record written before digests holds the JSON itself, and still recognises it.
        var legacy = record
        legacy.state = answer.jsonText
        #expect(legacy.records(answer.jsonText) && !legacy.records("{}"))
    }

    @Test("an expiry nobody announced: a record holding the digest and one holding the JSON (an older ledger) decide the same typed event")
    func expiryFromEitherRecord() async throws {
        let (ledger, record, answer) = try await Self.lapsingSubscriber()
        let later = try #require(answer.validUntil).addingTimeInterval(86_400)
        var digested = record
        digested.state = CustomerStateRecord.digest(of: answer.jsonText)
        var legacy = record
        legacy.state = answer.jsonText
        func decide(_ stored: CustomerStateRecord) -> [EventDraft] {
            EventDerivation.derive(
                .init(customer: Self.alice, stored: stored, ledgers: [ledger], causes: []), configuration: SimulatorFixture.entitlements, at: later
            ).drafts
        }
        let fromDigest = decide(digested)
        #expect(fromDigest.map(\.type) == [.subscriptionExpired])
        #expect(fromDigest.first?.cause.kind == .expiry && fromDigest.first?.changes["reason"] == .string("voluntary"))
        #expect(fromDigest.first?.sequence == record.sequence + 1)
        #expect(fromDigest == decide(legacy))
        // Before the expiry, nothing: the recorded state still holds.
        let before = EventDerivation.derive(
            .init(customer: Self.alice, stored: digested, ledgers: [ledger], causes: []), configuration: SimulatorFixture.entitlements,
            at: TestAppStore.start.addingTimeInterval(60))
        #expect(before.drafts.isEmpty && before.record == digested)
    }

    @Test(
        "a changed entitlement configuration: typed from the customer's last event when the ledger keeps it, else one customer.updated; an expiry in the same window still typed"
    )
    func configurationChange() async throws {
        let (ledger, record, answer) = try await Self.lapsingSubscriber()
        var digested = record
        digested.state = CustomerStateRecord.digest(of: answer.jsonText)
        var renamed = SimulatorFixture.entitlements
        renamed.productEntitlements["pro.monthly"] = ["gold"]
        func decide(at date: Date, lastEventState: String?) -> (drafts: [EventDraft], record: CustomerStateRecord?) {
            EventDerivation.derive(
                .init(customer: Self.alice, stored: digested, ledgers: [ledger], causes: [], lastEventState: lastEventState), configuration: renamed,
                at: date)
        }
        let soon = TestAppStore.start.addingTimeInterval(60)
        // The last event is kept: the state before is read back from it.
        let typed = decide(at: soon, lastEventState: answer.jsonText)
        #expect(typed.drafts.map(\.type) == [.subscriptionStatusChanged] && typed.drafts.first?.cause.kind == .expiry)
        #expect(typed.drafts.first?.state.contains("\"gold\"") == true)
        // An event whose state is not the recorded one is not used.
        #expect(decide(at: soon, lastEventState: "{}").drafts.map(\.type) == [.customerUpdated])
        // Pruned: one customer.updated, with the new state.
        let (drafts, recorded) = decide(at: soon, lastEventState: nil)
        #expect(drafts.map(\.type) == [.customerUpdated] && drafts.first?.cause.kind == .expiry && drafts.first?.changes == [:])
        #expect(drafts.first?.state.contains("\"gold\"") == true)
        #expect(recorded?.records(try #require(drafts.first).state) == true)
        // The configuration changed and the subscription lapsed before anyone looked: the expiry is still typed.
        let later = try #require(answer.validUntil).addingTimeInterval(86_400)
        let lapsed = decide(at: later, lastEventState: answer.jsonText)
        #expect(lapsed.drafts.map(\.type) == [.subscriptionExpired], "\(lapsed.drafts.map(\.type))")
        #expect(lapsed.drafts.first?.changes["reason"] == .string("voluntary"))
    }

    @Test(
        "the expiry comes first at the customer's next write when the expiry job did not look, then the write's own event",
        arguments: Backend.available)
    func expiryAtNextWrite(backend: Backend) async throws {
        let store = try await backend.makeStore()
        let now = TestClock(TestAppStore.start)
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        var fixture = SimulatorFixture()
        let bought = try await OutboxTests.buy("alice", "pro.monthly", in: store, &fixture)
        try fixture.engine.setAutoRenew(originalTransactionId: bought.originalTransactionId, enabled: false)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        let before = try await OutboxTests.allEvents(store)
        // Forty days later (by the server's clock; the App Store sent nothing) she buys coins: the expiry nobody
        // announced is told first.
        now.set(TestAppStore.start.addingTimeInterval(40 * 86_400))
        let token = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: false)
        _ = try fixture.engine.purchase(.init(customerId: "apple-alice", productId: "coins.100", appAccountToken: token))
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        let after = try await OutboxTests.allEvents(store).dropFirst(before.count)
        let expiredAndGranted = after.filter { [.subscriptionExpired, .consumableGranted].contains($0.type) }
        #expect(expiredAndGranted.map(\.type) == [.subscriptionExpired, .consumableGranted], "\(after.map(\.type))")
        #expect(expiredAndGranted.first?.draft.cause.kind == .expiry)
        #expect(after.map(\.draft.sequence) == Array((Int64(before.count) + 1)...Int64(before.count + after.count)))
        #expect(after.last?.draft.state == (try await OutboxTests.currentState(store, "alice")))
        await store.close()
    }
}
