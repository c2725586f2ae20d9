import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperTesting
import Testing

@Suite("Ledger stores: promotional entitlements granted and revoked by support", .dropsTestDatabases)
struct PromotionalGrantTests {
    static let app = OutboxTests.app
    static let alice = CustomerKey(bundleId: app, environment: .sandbox, customerId: "alice")

    /// A store whose outbox clock is `now`, with alice subscribed to pro.monthly by notification.
    static func aliceSubscribed(_ backend: Backend, now: TestClock) async throws -> any LedgerInspection {
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        var fixture = SimulatorFixture()
        try await OutboxTests.buy("alice", "pro.monthly", in: store, &fixture)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        return store
    }

    static func grant(_ entitlement: String, to customer: CustomerKey = alice, at: Date, days: Double) -> PromotionalGrant {
        PromotionalGrant(
            id: UUID().uuidString.lowercased(), customer: customer, entitlement: entitlement, grantedAt: at,
            expiresDate: at.addingTimeInterval(days * 86_400), grantedBy: "support-desk", reason: "outage on 2026-11-20")
    }

    static func audit(_ action: SupportAction.Kind, _ grant: PromotionalGrant, at: Date) -> SupportAction {
        SupportAction(
            at: at, keyName: "support-desk", customer: grant.customer, action: action.rawValue, target: grant.id, request: [:], outcome: "done",
            detail: ["grantId": .string(grant.id)])
    }

    /// The customer's answer from the read the server serves entitlements with (`entitlementLedger`).
    static func served(_ store: any LedgerStore, _ customer: CustomerKey = alice) async throws -> CustomerAnswer {
        var ledger = try await store.entitlementLedger(for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
        ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == customer.bundleId }
        return CustomerAnswer(
            for: customer.customerId, in: ledger, bundleId: customer.bundleId, environment: customer.environment,
            configuration: store.outbox.entitlements, at: store.outbox.now)
    }

    @Test(
        "a grant is an entitlement with source promotional and its grant's ID (no product, no transaction), in both reads, with its event and audit record; it expires by time, once",
        arguments: Backend.available)
    func grantAndExpiry(backend: Backend) async throws {
        let now = TestClock(TestAppStore.start)
        let store = try await Self.aliceSubscribed(backend, now: now)
        let before = try await OutboxTests.allEvents(store).count
        let made = Self.grant("pro", at: now.now, days: 100)
        guard
            case .done(let granted, let actionId) = try await store.changeGrant(.grant(made), audit: Self.audit(.grantPromotional, made, at: now.now))
        else {
            Issue.record("the grant was refused")
            return
        }
        #expect(granted == made && actionId > 0)
        #expect(try await store.supportActions(customer: Self.alice).map(\.id) == [actionId])
        #expect(try await store.promotionalGrants(Self.alice) == [made])

        let answer = try await Self.served(store)
        let promotional = try #require(answer.entitlements.first { $0.grantId == made.id })
        #expect(promotional.entitlement == "pro" && promotional.source == "promotional" && promotional.expiresDate == made.expiresDate)
        #expect(answer.entitlements.contains { $0.grantId == nil && $0.productId == "pro.monthly" }, "the purchase stays beside it")
        #expect(!answer.nonConsumables.contains("") && answer.subscriptions.count == 1, "a grant is not a purchase")
        let json = answer.jsonText
        #expect(
            json.contains(
                #"{"entitlement":"pro","expiresDate":\#(made.expiresDate.epochMilliseconds),"grantId":"\#(made.id)","inBillingRetry":false,"inGracePeriod":false,"source":"promotional"}"#
            ))
        #expect(json == (try await OutboxTests.currentState(store, "alice")), "the full read answers the same")

        let events = try await OutboxTests.allEvents(store)
        #expect(events.count == before + 1)
        let event = try #require(events.last)
        #expect(event.type == .promotionalGranted && event.draft.cause.kind == .api && event.draft.cause.id == made.id)
        #expect(event.draft.changes["grantId"] == .string(made.id) && event.draft.changes["entitlement"] == .string("pro"))
        #expect(event.draft.state == json)

        // The subscription expires after a month and the grant after 100 days: each is an event when the job looks.
        now.set(TestAppStore.start.addingTimeInterval(101 * 86_400))
        let due = try await store.customersDue(at: now.now, limit: 10)
        #expect(due == [Self.alice])
        async let first = store.reevaluate(due)
        async let second = store.reevaluate(due)
        _ = try await (first, second)
        let after = try await OutboxTests.allEvents(store)
        #expect(after.filter { $0.type == .promotionalExpired }.count == 1)
        let expired = try #require(after.first { $0.type == .promotionalExpired })
        #expect(expired.draft.cause.kind == .expiry && expired.draft.changes["grantId"] == .string(made.id))
        #expect(try await Self.served(store).entitlements.isEmpty)
        #expect(try await store.customersDue(at: now.now, limit: 10).isEmpty)
        await store.close()
    }

    @Test(
        "revoking ends the entitlement at once with its event; a second revocation, an unknown grant and another customer's grant change nothing",
        arguments: Backend.available)
    func revocation(backend: Backend) async throws {
        let now = TestClock(TestAppStore.start)
        let store = try await Self.aliceSubscribed(backend, now: now)
        let made = Self.grant("pro", at: now.now, days: 30)
        _ = try await store.changeGrant(.grant(made), audit: Self.audit(.grantPromotional, made, at: now.now))
        let bob = CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "bob")
        let bobs = Self.grant("pro", to: bob, at: now.now, days: 30)
        _ = try await store.changeGrant(.grant(bobs), audit: Self.audit(.grantPromotional, bobs, at: now.now))

        now.set(TestAppStore.start.addingTimeInterval(3_600))
        func revoke(_ id: String, of customer: CustomerKey = Self.alice) async throws -> PromotionalGrantOutcome {
            try await store.changeGrant(
                .revoke(id: id, customer: customer, at: now.now, keyName: "lead", reason: "granted by mistake"),
                audit: Self.audit(.revokePromotional, made, at: now.now))
        }
        guard case .refused(.unknownGrant, let probe) = try await revoke(bobs.id) else {
            Issue.record("bob's grant is not alice's")
            return
        }
        #expect(probe > 0, "a refused attempt is audited")
        guard case .refused(.unknownGrant, _) = try await revoke(UUID().uuidString.lowercased()) else {
            Issue.record("an unknown grant is refused")
            return
        }
        guard case .done(let revoked, _) = try await revoke(made.id) else {
            Issue.record("not revoked")
            return
        }
        #expect(revoked.revokedAt == now.now && revoked.revokedBy == "lead" && revoked.revokeReason == "granted by mistake")
        #expect(try await store.promotionalGrants(Self.alice) == [revoked])
        guard case .refused(.alreadyRevoked(let again), _) = try await revoke(made.id) else {
            Issue.record("revoked twice")
            return
        }
        #expect(again == revoked)
        #expect(try await Self.served(store).entitlements.allSatisfy { $0.grantId == nil })
        #expect(try await Self.served(store, bob).entitlements.map(\.grantId) == [bobs.id], "bob keeps his")
        let events = try await OutboxTests.allEvents(store, filter: EventFilter(customerId: "alice"))
        #expect(events.filter { $0.type == .promotionalRevoked }.count == 1)
        #expect(events.last?.type == .promotionalRevoked && events.last?.draft.changes["revokedAt"] == .integer(now.now.epochMilliseconds))
        let actions = try await store.supportActions(customer: Self.alice)
        #expect(actions.map(\.outcome) == ["done", "refused", "refused", "done", "refused"], "refusals are audited and change nothing else")
        #expect(actions[1].detail["refused"] == .string("unknown-grant") && actions[4].detail["refused"] == .string("grant-revoked"))
        // Nothing is due: the revoked grant's expiry no longer matters.
        now.set(TestAppStore.start.addingTimeInterval(20 * 86_400))
        #expect(try await store.customersDue(at: now.now, limit: 10).isEmpty)
        await store.close()
    }

    @Test(
        "an expired grant cannot be revoked; a customer has at most 20 active grants (expired and revoked ones do not count)",
        arguments: Backend.available)
    func limits(backend: Backend) async throws {
        let now = TestClock(TestAppStore.start)
        let store = try await Self.aliceSubscribed(backend, now: now)
        let short = Self.grant("pro", at: now.now, days: 1)
        _ = try await store.changeGrant(.grant(short), audit: Self.audit(.grantPromotional, short, at: now.now))
        now.set(TestAppStore.start.addingTimeInterval(2 * 86_400))
        guard
            case .refused(.expired(let expired), _) = try await store.changeGrant(
                .revoke(id: short.id, customer: Self.alice, at: now.now, keyName: "lead", reason: "late"),
                audit: Self.audit(.revokePromotional, short, at: now.now))
        else {
            Issue.record("an expired grant was revoked")
            return
        }
        let stored = try await store.promotionalGrants(Self.alice)
        #expect(expired.revokedAt == nil && stored.first?.revokedAt == nil, "unchanged")
        for _ in 0..<PromotionalGrant.activeLimit {
            let grant = Self.grant("pro", at: now.now, days: 30)
            guard case .done = try await store.changeGrant(.grant(grant), audit: Self.audit(.grantPromotional, grant, at: now.now)) else {
                Issue.record("a grant under the limit was refused")
                return
            }
        }
        let over = Self.grant("pro", at: now.now, days: 30)
        guard
            case .refused(.tooMany(let limit), _) = try await store.changeGrant(.grant(over), audit: Self.audit(.grantPromotional, over, at: now.now))
        else {
            Issue.record("the 21st active grant was made")
            return
        }
        let all = try await store.promotionalGrants(Self.alice)
        #expect(limit == 20 && all.count == 21, "the expired one and 20 active")
        await store.close()
    }

    @Test(
        "a grant makes a customer with no purchase known to their app only; erasure removes their grants",
        arguments: Backend.available)
    func knownAndErased(backend: Backend) async throws {
        let now = TestClock(TestAppStore.start)
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        let carol = CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "carol")
        #expect(try await !store.customerExists("carol", bundleId: Self.app, environment: .sandbox))
        let made = Self.grant("beta", to: carol, at: now.now, days: 7)
        _ = try await store.changeGrant(.grant(made), audit: Self.audit(.grantPromotional, made, at: now.now))
        #expect(try await store.customerExists("carol", bundleId: Self.app, environment: .sandbox))
        #expect(try await !store.customerExists("carol", bundleId: "com.example.other", environment: .sandbox))
        #expect(try await !store.customerExists("carol", bundleId: Self.app, environment: .production))
        #expect(
            try await Self.served(store, CustomerKey(bundleId: "com.example.other", environment: .sandbox, customerId: "carol")).entitlements.isEmpty)
        #expect(try await Self.served(store, carol).entitlements.map(\.entitlement) == ["beta"])
        let erased = try #require(try await store.erase(carol))
        #expect(erased.eventsRemoved == 1)
        #expect(try await store.promotionalGrants(carol).isEmpty)
        #expect(try await !store.customerExists("carol", bundleId: Self.app, environment: .sandbox))
        #expect(try await store.supportActions(customer: carol).count == 1, "the audit log keeps who granted what")
        await store.close()
    }
}

@Suite("Ledger copy: promotional grants", .needsPostgres, .dropsTestDatabases)
struct PromotionalGrantCopyTests {
    @Test("a copy carries every grant, revoked ones too, and the copied ledger serves them")
    func copied() async throws {
        let now = TestClock(TestAppStore.start)
        let source = try await PromotionalGrantTests.aliceSubscribed(.sqlite, now: now)
        let one = PromotionalGrantTests.grant("pro", at: now.now, days: 30)
        let two = PromotionalGrantTests.grant("beta", at: now.now, days: 60)
        for grant in [one, two] {
            _ = try await source.changeGrant(.grant(grant), audit: PromotionalGrantTests.audit(.grantPromotional, grant, at: now.now))
        }
        _ = try await source.changeGrant(
            .revoke(id: two.id, customer: PromotionalGrantTests.alice, at: now.now, keyName: "lead", reason: "no"),
            audit: PromotionalGrantTests.audit(.revokePromotional, two, at: now.now))
        let target = try await PostgresTestDatabase.openStore()
        target.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        _ = try await LedgerCopy.copy(from: try #require(source as? SQLiteLedgerStore), to: target, pageSize: 1)
        #expect(try await target.promotionalGrants(PromotionalGrantTests.alice) == source.promotionalGrants(PromotionalGrantTests.alice))
        #expect(try await PromotionalGrantTests.served(target) == PromotionalGrantTests.served(source))
        await target.close()
    }
}
