import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

@Suite("The outbox: every change of a customer's state is an event, in order, once", .dropsTestDatabases)
struct OutboxTests {
    static let app = "com.example.storekeeper"

    /// `customer`, known by the token the server issued them, buys `product` at the simulator (as `apple-CUSTOMER`).
    @discardableResult
    static func buy(
        _ customer: String, _ product: String, in store: any LedgerStore, _ fixture: inout SimulatorFixture
    ) async throws -> LifecycleEngine.PurchaseResult {
        let token = try await store.appAccountToken(for: customer, bundleId: app, environment: .sandbox, renew: false)
        try fixture.customer("apple-\(customer)")
        return try fixture.engine.purchase(.init(customerId: "apple-\(customer)", productId: product, appAccountToken: token))
    }

    /// A new store of `backend`, its outbox's clock at the App Store's start, with `customer`'s purchase of `product`
    /// (their server-issued token on it) applied from its notifications.
    static func storeWithPurchase(
        _ customer: String, _ product: String, on backend: Backend
    ) async throws -> (store: any LedgerInspection, fixture: SimulatorFixture, bought: LifecycleEngine.PurchaseResult) {
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        var fixture = SimulatorFixture()
        let bought = try await buy(customer, product, in: store, &fixture)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        return (store, fixture, bought)
    }

    /// Every event of the store, oldest first.
    static func allEvents(_ store: any LedgerStore, filter: EventFilter = EventFilter()) async throws -> [LedgerEvent] {
        var events: [LedgerEvent] = []
        var position: Int64 = 0
        while true {
            let page = try await store.events(after: position, limit: 100, filter: filter)
            guard let last = page.last else { return events }
            events += page
            position = last.position
        }
    }

    /// The customer's answer JSON as `GET /v1/customers/{id}` gives it at the store's outbox clock.
    static func currentState(_ store: any LedgerStore, _ customerId: String, environment: AppStoreEnvironment = .sandbox) async throws -> String {
        var ledger = try await store.ledger(for: customerId, bundleId: app, environment: environment)
        ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == app }
        let answer = CustomerAnswer(
            for: customerId, in: ledger, bundleId: app, environment: environment, configuration: store.outbox.entitlements, at: store.outbox.now)
        return answer.jsonText
    }

    @Test(
        "a subscription's life, by notifications alone, is a sequence of typed events, numbered without gaps, each with the state the customer read answers",
        arguments: Backend.available)
    func subscriptionLife(backend: Backend) async throws {
        let store = try await backend.makeStore()
        var fixture = SimulatorFixture()
        let now = TestClock(TestAppStore.start)
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        let bought = try await Self.buy("alice", "pro.monthly", in: store, &fixture)
        let original = bought.originalTransactionId
        func deliver() async throws {
            now.set(fixture.engine.state.now)
            for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        }
        try await deliver()
        try fixture.advance(days: 31)
        try await deliver()
        try fixture.engine.setAutoRenew(originalTransactionId: original, enabled: false)
        try await deliver()
        try fixture.engine.setAutoRenew(originalTransactionId: original, enabled: true)
        try await deliver()
        try fixture.engine.setBilling(customerId: "apple-alice", works: false)
        try fixture.advance(days: 31)
        try await deliver()
        try fixture.engine.setBilling(customerId: "apple-alice", works: true)
        try fixture.advance(days: 2)
        try await deliver()

        let events = try await Self.allEvents(store)
        #expect(events.map(\.customer.customerId).allSatisfy { $0 == "alice" })
        #expect(events.map(\.draft.sequence) == Array(1...Int64(events.count)), "one sequence without gaps")
        #expect(events.map(\.position) == events.map(\.position).sorted())
        let types = events.map(\.type)
        #expect(types.first == .subscriptionStarted)
        #expect(types.contains(.subscriptionRenewed))
        #expect(types.contains(.subscriptionAutoRenewDisabled))
        #expect(types.contains(.subscriptionAutoRenewEnabled))
        #expect(types.contains(.subscriptionBillingIssue) || types.contains(.subscriptionGracePeriodStarted))
        #expect(types.contains(.subscriptionBillingRecovered))
        // Each notification arrives when the App Store's clock has moved on: an access that lapsed before it is an
        // expiry by time, told first; everything else is the notification's.
        for event in events where event.draft.cause.kind != .notification {
            #expect(event.draft.cause.kind == .expiry && event.type == .subscriptionExpired, "\(event.type) caused by \(event.draft.cause)")
        }
        #expect(events.last?.draft.state == (try await Self.currentState(store, "alice")), "the last event carries the state a read answers")
        // Applying everything again changes nothing, so it emits nothing.
        let last = try await store.lastEventPosition()
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        #expect(try await store.lastEventPosition() == last)
        await store.close()
    }

    @Test("the outbox's clock is read a million times (once a write) and stays one call: it once grew by a thunk a read")
    func clockReadsDoNotAccumulate() {
        let settings = OutboxSettings()
        let moment = TestAppStore.start
        settings.configure(entitlements: SimulatorFixture.entitlements, clock: { moment })
        var differing = 0
        // Before the fix, each read wrapped the stored clock once more: this loop overflowed the stack.
        for _ in 0..<1_000_000 where settings.now != moment { differing += 1 }
        #expect(differing == 0)
        #expect(settings.entitlements == SimulatorFixture.entitlements)
    }

    @Test(
        "retention drops old events once delivered, keeps those a delivery waits for and those a configured endpoint was not handed yet",
        arguments: Backend.available)
    func retention(backend: Backend) async throws {
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        let route = WebhookRoute(name: "backend")
        _ = try await store.fanOut(route, limit: 0, now: TestAppStore.start)
        var fixture = SimulatorFixture()
        for index in 0..<6 { try await Self.buy("user-\(index)", "coins.100", in: store, &fixture) }
        _ = try await store.applyRecovered(try await fixture.verifiedNotifications(), watermark: nil)
        let events = try await Self.allEvents(store)
        try #require(events.count == 6)
        // The endpoint is handed the first three; the first is delivered, the next two wait.
        #expect(try await store.fanOut(route, limit: 3, now: TestAppStore.start) == 3)
        let claimed = try await store.claimDeliveries(endpoint: route.name, holder: "test", limit: 10, now: TestAppStore.start, lease: .seconds(60))
        try #require(claimed.map(\.event.id) == events.prefix(3).map(\.id))
        let attempt = DeliveryAttempt(attemptedAt: TestAppStore.start, statusCode: 204, latencyMilliseconds: 1, error: nil, responseExcerpt: nil)
        try await store.finishAttempts(
            endpoint: route.name, holder: "test", [FinishedAttempt(position: events[0].position, attempt: attempt, outcome: .delivered)])
        let later = Date().addingTimeInterval(86_400)
        // Every event is past the cut-off: only the delivered one goes while the endpoint is configured.
        #expect(try await store.pruneEvents(occurredBefore: later, keepingUnsentTo: [route.name]) == 1)
        #expect(try await Self.allEvents(store).map(\.id) == events.dropFirst().map(\.id))
        // An endpoint removed from the configuration holds back nothing but its waiting deliveries (and the newest
        // event: positions are never handed out twice, so an event after a pruning is after every cursor).
        #expect(try await store.pruneEvents(occurredBefore: later, keepingUnsentTo: []) == 2)
        #expect(try await Self.allEvents(store).map(\.id) == (events[1..<3] + events.suffix(1)).map(\.id))
        try await Self.buy("user-late", "coins.100", in: store, &fixture)
        _ = try await store.applyRecovered(try await fixture.verifiedNotifications(), watermark: nil)
        let after = try await Self.allEvents(store)
        #expect(after.count == 4 && after.last!.position > events.last!.position, "\(after.map(\.position))")
        // Nothing before the cut-off: nothing dropped.
        #expect(try await store.pruneEvents(occurredBefore: TestAppStore.start.addingTimeInterval(-86_400 * 3_650), keepingUnsentTo: []) == 0)
        await store.close()
    }

    @Test("notifications applied together (a batch, a recovered page) have the events of each, once", arguments: Backend.available)
    func together(backend: Backend) async throws {
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        var fixture = SimulatorFixture()
        for index in 0..<4 { try await Self.buy("user-\(index)", index % 2 == 0 ? "coins.100" : "pro.monthly", in: store, &fixture) }
        let notifications = try await fixture.verifiedNotifications()
        _ = try await store.applyRecovered(notifications, watermark: nil)
        let events = try await Self.allEvents(store)
        #expect(
            events.map(\.type) == [.consumableGranted, .subscriptionStarted, .consumableGranted, .subscriptionStarted],
            "\(events.map { "\($0.customer.customerId) \($0.type)" })")
        #expect(events.allSatisfy { $0.draft.sequence == 1 })
        await store.close()
    }

    @Test(
        "restore policies: keep refuses another customer's purchase; transfer moves it and its renewals, with an event for each side; racing submitters leave one owner",
        arguments: Backend.available)
    func restorePolicies(backend: Backend) async throws {
        let store = try await backend.makeStore()
        let now = TestClock(TestAppStore.start)
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        var fixture = SimulatorFixture()
        try fixture.customer("apple-1")
        let bought = try fixture.engine.purchase(.init(customerId: "apple-1", productId: "pro.monthly"))
        let lifetime = try fixture.engine.purchase(.init(customerId: "apple-1", productId: "unlock.lifetime"))
        let verify = { (id: String) async throws -> VerifiedSignedData<TransactionInfo> in
            try await fixture.verifier.verifyTransaction(try fixture.engine.signTransaction(id))
        }
        _ = try await store.submit(try await verify(bought.transactionId), customerId: "bob")
        _ = try await store.submit(try await verify(lifetime.transactionId), customerId: "bob")
        // keep: refused, nothing changes.
        let kept = try await store.submit(try await verify(bought.transactionId), customerId: "carol", policy: .keep)
        guard case .refused = kept else {
            Issue.record("keep let carol take bob's purchase")
            return
        }
        let before = try await store.lastEventPosition()
        // transfer: the subscription and the lifetime unlock move to carol.
        for id in [bought.transactionId, lifetime.transactionId] {
            let moved = try await store.submit(try await verify(id), customerId: "carol", policy: .transfer)
            guard case .linked = moved else {
                Issue.record("transfer refused: \(moved)")
                return
            }
        }
        let events = try await Self.allEvents(store).filter { $0.position > before }
        #expect(
            events.map { "\($0.customer.customerId) \($0.type.rawValue)" } == [
                "bob customer.transferred_out", "carol customer.transferred_in", "bob customer.transferred_out", "carol customer.transferred_in",
            ])
        #expect(events.first?.draft.changes["to"] == .string("carol") && events[1].draft.changes["from"] == .string("bob"))
        #expect(!(try await Self.currentState(store, "bob")).contains("\"entitlement\""), "bob lost the entitlements at once")
        #expect((try await Self.currentState(store, "carol")).contains("pro.monthly"))
        // Its renewal, by notification alone, is carol's.
        try fixture.advance(days: 31)
        now.set(fixture.engine.state.now)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        let renewal = try #require(try await Self.allEvents(store).last)
        #expect(renewal.customer.customerId == "carol" && renewal.type == .subscriptionRenewed, "\(renewal.type)")
        // Two customers racing to take it: one owner at the end, and events that agree with it.
        let latest = try #require(
            fixture.engine.state.transactions.values.filter { $0.info.originalTransactionId == bought.originalTransactionId }
                .max { $0.info.purchaseDate < $1.info.purchaseDate })
        let signed = try await verify(latest.info.transactionId)
        async let dave = store.submit(signed, customerId: "dave", policy: .transfer)
        async let erin = store.submit(signed, customerId: "erin", policy: .transfer)
        _ = try await (dave, erin)
        let owners = try await ["dave", "erin"].asyncFilter { (try await Self.currentState(store, $0)).contains("pro.monthly") }
        #expect(owners.count == 1, "one winner: \(owners)")
        await store.close()
    }

    @Test(
        "erasure removes the customer's identity and earlier events, keeps the purchases, says so in an event; a later submission starts a new customer",
        arguments: Backend.available)
    func erasure(backend: Backend) async throws {
        let (store, fixture, bought) = try await Self.storeWithPurchase("alice", "pro.monthly", on: backend)
        let alice = CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "alice")
        #expect(try await store.erase(CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "nobody")) == nil)
        let before = try await store.lastEventPosition()
        let erased = try #require(try await store.erase(alice))
        #expect(erased.tokensRemoved == 1 && erased.eventsRemoved == 1)
        let events = try await Self.allEvents(store)
        #expect(events.map(\.type) == [.customerErased], "earlier events are gone, the erasure says so")
        // Alice's events were the newest: the erasure's still comes after them (no position is handed out twice, or it
        // would be behind every endpoint's cursor and every poller's).
        #expect(try #require(events.first).position > before)
        #expect(events.first?.draft.sequence == 2 && events.first?.id.description == erased.eventId)
        #expect(try await !store.customerExists("alice", bundleId: Self.app, environment: .sandbox))
        #expect(try await !store.ledger(families: [LedgerKey(.sandbox, bought.originalTransactionId)]).transactions.isEmpty, "the purchase stays")
        // The same person, signed in anew, restores the purchase: a new customer, no conflict.
        let signed = try await fixture.verifier.verifyTransaction(try fixture.engine.signTransaction(bought.transactionId))
        guard case .linked = try await store.submit(signed, customerId: "alice-2") else {
            Issue.record("the restore was refused")
            return
        }
        #expect((try await Self.currentState(store, "alice-2")).contains("pro.monthly"))
        #expect(!(try await Self.currentState(store, "alice")).contains("pro.monthly"))
        await store.close()
    }

    @Test(
        "an erased customer's token is retired: a later submission carrying it links (or, under transfer, moves) that purchase alone, never the token, so the erased identity's other purchases stay no one's, now and at their renewals",
        arguments: Backend.available)
    func erasedTokenRetired(backend: Backend) async throws {
        let (store, purchased, subscription) = try await Self.storeWithPurchase("alice", "pro.monthly", on: backend)
        var fixture = purchased
        let token = try await store.appAccountToken(for: "alice", bundleId: Self.app, environment: .sandbox, renew: false)
        let unlock = try fixture.engine.purchase(.init(customerId: "apple-alice", productId: "unlock.lifetime", appAccountToken: token))
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        #expect((try await Self.currentState(store, "alice")).contains("unlock.lifetime"))
        let erased = try #require(try await store.erase(CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "alice")))
        #expect(erased.tokensRemoved == 1)

        // The same person restores one purchase under a new account: that purchase is theirs, the other is not.
        let signed = try await fixture.verifier.verifyTransaction(try fixture.engine.signTransaction(unlock.transactionId))
        guard case .linked = try await store.submit(signed, customerId: "alice-2") else {
            Issue.record("the restore was refused")
            return
        }
        let restored = try await Self.currentState(store, "alice-2")
        #expect(restored.contains("unlock.lifetime") && !restored.contains("pro.monthly"), "\(restored)")
        // Moved on under the transfer policy, it moves alone too: the move does not take the retired token either.
        guard case .linked = try await store.submit(signed, customerId: "alice-2b", policy: .transfer) else {
            Issue.record("the transfer was refused")
            return
        }
        let moved = try await Self.currentState(store, "alice-2b")
        #expect(moved.contains("unlock.lifetime") && !moved.contains("pro.monthly"), "\(moved)")
        #expect(!(try await Self.currentState(store, "alice-2")).contains("unlock.lifetime"))
        // A renewal of the other purchase, by notification alone, names no one.
        let before = try await store.lastEventPosition()
        try fixture.advance(days: 31)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        #expect(!(try await Self.currentState(store, "alice-2")).contains("pro.monthly"))
        let afterRenewal = try await Self.allEvents(store).filter { $0.position > before }
        #expect(afterRenewal.isEmpty, "no customer's state changed: \(afterRenewal.map(\.type))")
        // Restored too, that purchase is linked alone as well, to whoever restores it (the token names no one to refuse).
        let renewed = try #require(
            fixture.engine.state.transactions.values.filter { $0.info.originalTransactionId == subscription.originalTransactionId }
                .max { $0.info.purchaseDate < $1.info.purchaseDate })
        let signedRenewal = try await fixture.verifier.verifyTransaction(try fixture.engine.signTransaction(renewed.info.transactionId))
        guard case .linked = try await store.submit(signedRenewal, customerId: "alice-3") else {
            Issue.record("the second restore was refused")
            return
        }
        #expect((try await Self.currentState(store, "alice-3")).contains("pro.monthly"))
        #expect(!(try await Self.currentState(store, "alice-3")).contains("unlock.lifetime"))
        #expect(!(try await Self.currentState(store, "alice-2")).contains("pro.monthly"))
        await store.close()
    }

    @Test(
        "erasing the customer a purchase was transferred to returns it to its token's owner at once, with an event for them caused by the erasure",
        arguments: Backend.available)
    func erasureReturnsTransferredPurchase(backend: Backend) async throws {
        // Bob's purchase carries his server-issued token; carol restores it under the transfer policy.
        let (store, fixture, bought) = try await Self.storeWithPurchase("bob", "pro.monthly", on: backend)
        let signed = try await fixture.verifier.verifyTransaction(try fixture.engine.signTransaction(bought.transactionId))
        guard case .linked = try await store.submit(signed, customerId: "carol", policy: .transfer) else {
            Issue.record("the transfer was refused")
            return
        }
        let transferred = try await Self.currentState(store, "bob")
        #expect(!transferred.contains("pro.monthly"), "\(transferred)")
        let before = try await store.lastEventPosition()
        // Bob's event of the move names carol, until she is erased.
        let movedOut = try #require(try await Self.allEvents(store).last { $0.customer.customerId == "bob" && $0.type == .customerTransferredOut })
        #expect(movedOut.draft.changes["to"] == .string("carol") && movedOut.draft.cause.transferredTo == "carol")

        _ = try #require(try await store.erase(CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "carol")))
        // Erased, carol is named by no event kept: bob's event of the move keeps its type, subject and state, without her.
        let scrubbed = try #require(try await Self.allEvents(store).first { $0.position == movedOut.position })
        #expect(scrubbed.id == movedOut.id && scrubbed.type == .customerTransferredOut && scrubbed.draft.state == movedOut.draft.state)
        #expect(scrubbed.draft.changes["to"] == nil && scrubbed.draft.changes["productId"] == .string("pro.monthly"), "\(scrubbed.draft.changes)")
        #expect(scrubbed.draft.cause.transferredTo == nil && scrubbed.draft.cause.kind == .submission, "\(scrubbed.draft.cause)")
        #expect(
            try await Self.allEvents(store).allSatisfy {
                !$0.draft.causeJSON.contains("carol") && !$0.draft.changesJSON.contains("carol") || $0.type == .customerErased
            })
        // The purchase is bob's again (his token owns it once carol's link is gone), and his events say so.
        let bobState = try await Self.currentState(store, "bob")
        #expect(bobState.contains("pro.monthly"))
        let events = try await Self.allEvents(store).filter { $0.position > before }
        #expect(events.map { "\($0.customer.customerId) \($0.type.rawValue)" } == ["carol customer.erased", "bob customer.updated"])
        let returned = try #require(events.last)
        #expect(returned.draft.cause == EventCause(.api, id: "erase"))
        #expect(returned.draft.state == bobState)
        #expect(!returned.draft.state.contains("carol") && !returned.draft.causeJSON.contains("carol"), "the event names no one erased")
        // Nothing more to tell: the expiry job and bob's next write find his state as recorded.
        #expect(try await store.reevaluate([CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "bob")]) == 0)
        await store.close()
    }

    @Test(
        "an offer redeemed on an active subscription (no transaction until the next renewal) is subscription.offer_redeemed with the offer, not a status change",
        arguments: Backend.available)
    func offerOnActiveSubscription(backend: Backend) async throws {
        let (store, purchased, bought) = try await Self.storeWithPurchase("alice", "pro.monthly", on: backend)
        var fixture = purchased
        let before = try await store.lastEventPosition()
        let redeemed = try fixture.engine.purchase(.init(customerId: "apple-alice", productId: "pro.monthly", offerId: "promo.half"))
        #expect(redeemed.outcome == "offer-redeemed")
        let notifications = try await fixture.verifiedNotifications()
        #expect(notifications.last?.payload.notificationType == .offerRedeemed)
        for notification in notifications { _ = try await store.apply(notification) }
        let events = try await Self.allEvents(store).filter { $0.position > before }
        #expect(events.map(\.type) == [.subscriptionOfferRedeemed], "\(events.map(\.type))")
        let offer = try #require(events.first)
        #expect(offer.draft.changes["originalTransactionId"] == .string(bought.originalTransactionId))
        #expect(offer.draft.changes["offerIdentifier"] == .string("promo.half") && offer.draft.changes["offerType"] == .integer(2))
        #expect(offer.draft.changes["transactionId"] == nil, "no transaction until the next renewal")
        #expect(offer.draft.state == (try await Self.currentState(store, "alice")))
        // Redeemed again (a new OFFER_REDEEMED): a redemption again, not a status change.
        _ = try fixture.engine.purchase(.init(customerId: "apple-alice", productId: "pro.monthly", offerId: "promo.half"))
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        let again = try await Self.allEvents(store).filter { $0.position > offer.position }
        #expect(again.map(\.type) == [.subscriptionOfferRedeemed], "\(again.map { "\($0.type) \($0.draft.changes)" })")
        await store.close()
    }

    @Test("an expiry nobody announces is an event when the expiry job looks, once, whoever looks", arguments: Backend.available)
    func expiryByTime(backend: Backend) async throws {
        let store = try await backend.makeStore()
        var fixture = SimulatorFixture()
        let now = TestClock(TestAppStore.start)
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { now.now })
        let bought = try await Self.buy("alice", "pro.monthly", in: store, &fixture)
        try fixture.engine.setAutoRenew(originalTransactionId: bought.originalTransactionId, enabled: false)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        #expect(try await store.customersDue(at: now.now, limit: 10).isEmpty)
        // A month later, with no notification (the App Store's clock has not moved).
        now.set(TestAppStore.start.addingTimeInterval(40 * 86_400))
        let due = try await store.customersDue(at: now.now, limit: 10)
        #expect(due == [CustomerKey(bundleId: Self.app, environment: .sandbox, customerId: "alice")])
        // Two instances looking at once: one event.
        async let first = store.reevaluate(due)
        async let second = store.reevaluate(due)
        #expect(try await first + second == 1)
        #expect(try await store.customersDue(at: now.now, limit: 10).isEmpty)
        let events = try await Self.allEvents(store)
        let expired = try #require(events.last)
        #expect(expired.type == .subscriptionExpired)
        #expect(expired.draft.cause.kind == .expiry)
        #expect(expired.draft.changes["reason"] == .string("voluntary"))
        #expect(expired.draft.state == (try await Self.currentState(store, "alice")))
        #expect(!expired.draft.state.contains("\"entitlement\""), "no entitlement left")
        await store.close()
    }

    @Test(
        "every shipped scenario: events folded per customer end in the state a read answers; any order with duplicates, one by one or all at once, ends in the same states and emits nothing for a change that did not happen",
        arguments: ShippedScenarios.all.map(\.name))
    func scenarios(name: String) async throws {
        var fixture = SimulatorFixture()
        try await fixture.play(name)
        let notifications = try await fixture.verifiedNotifications()
        // What the apps submit: each purchase's first transaction, as its first notification carried it.
        let customers = Dictionary(fixture.engine.state.transactions.values.map { ($0.info.transactionId, $0.customerId) }, uniquingKeysWith: { $1 })
        var submissions: [(VerifiedSignedData<TransactionInfo>, String)] = []
        var families = Set<String>()
        for notification in notifications {
            guard let transaction = notification.transaction, families.insert(transaction.payload.originalTransactionId).inserted,
                let customer = customers[transaction.payload.transactionId]
            else { continue }
            submissions.append((transaction, customer))
        }
        let truth = fixture.engine.groundTruth()
        let end = fixture.engine.state.now
        var finals: [[String: String]] = []
        let backends = Backend.available
        for (round, backend) in (backends + backends + backends).enumerated() {
            let store = try await backend.makeStore()
            store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { end })
            for (transaction, customer) in submissions { _ = try await store.submit(transaction, customerId: customer) }
            // The first round in the App Store's order; the next, shuffled with every notification twice; the last,
            // the same all at once (applied in batches, as notifications arriving together are).
            var order = notifications
            if round >= backends.count {
                var generator = SeededGenerator(seed: UInt64(name.utf8.reduce(0) { $0 &* 31 &+ UInt64($1) }))
                order = (notifications + notifications).shuffled(using: &generator)
            }
            if round >= 2 * backends.count {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for notification in order { group.addTask { _ = try await store.apply(notification) } }
                    try await group.waitForAll()
                }
            } else {
                for notification in order { _ = try await store.apply(notification) }
            }
            let events = try await Self.allEvents(store)
            var folded: [String: String] = [:]
            var sequences: [String: Int64] = [:]
            for event in events {
                let customer = event.customer.customerId
                #expect(event.draft.sequence == sequences[customer, default: 0] + 1, "\(name): \(customer)'s sequence has no gap")
                sequences[customer] = event.draft.sequence
                folded[customer] = event.draft.state
            }
            for customer in truth.map(\.customerId) where folded[customer] != nil {
                #expect(folded[customer] == (try await Self.currentState(store, customer)), "\(name): \(customer)'s last event is their state")
            }
            finals.append(folded)
            // Everything again: nothing changes, nothing is emitted.
            let last = try await store.lastEventPosition()
            for notification in notifications { _ = try await store.apply(notification) }
            #expect(try await store.lastEventPosition() == last, "\(name): duplicates emit nothing")
            await store.close()
        }
        for other in finals.dropFirst() { #expect(other == finals[0], "\(name): the same final states in any order") }
    }
}

/// A deterministic shuffle (SplitMix64).
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension Array {
    func asyncFilter(_ isIncluded: (Element) async throws -> Bool) async rethrows -> [Element] {
        var kept: [Element] = []
        for element in self where try await isIncluded(element) { kept.append(element) }
        return kept
    }
}
