import AppStoreModels
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

@Suite(
    "Deliveries: a redelivery never doubles a send in flight; a fan-out never resets a delivery; a deleted event holds nothing back",
    .dropsTestDatabases)
struct DeliveryClaimTests {
    static func delivered(_ events: [LedgerEvent]) -> [FinishedAttempt] {
        events.map {
            FinishedAttempt(
                position: $0.position,
                attempt: DeliveryAttempt(attemptedAt: Date(), statusCode: 204, latencyMilliseconds: 1, error: nil, responseExcerpt: nil),
                outcome: .delivered)
        }
    }

    /// A new store of `backend` with `endpoint` registered, then each of `customers` buying a consumable (one event
    /// each, after the endpoint's cursor).
    static func storeBuying(
        _ customers: [String], on backend: Backend, endpoint: WebhookRoute
    ) async throws -> (store: any LedgerInspection, fixture: SimulatorFixture) {
        let store = try await backend.makeStore()
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        _ = try await store.fanOut(endpoint, limit: 0, now: Date())
        var fixture = SimulatorFixture()
        for customer in customers { try await OutboxTests.buy(customer, "coins.100", in: store, &fixture) }
        _ = try await store.applyRecovered(try await fixture.verifiedNotifications(), watermark: nil)
        return (store, fixture)
    }

    @Test("redeliver and replay around claims, fan-outs and an erasure", arguments: Backend.available)
    func claimsAroundRedelivery(backend: Backend) async throws {
        let route = WebhookRoute(name: "backend")
        let (store, bought) = try await Self.storeBuying(["user-0", "user-1"], on: backend, endpoint: route)
        var fixture = bought
        let events = try await OutboxTests.allEvents(store)
        try #require(events.count == 2)
        #expect(try await store.fanOut(route, limit: 10, now: Date()) == 2, "the events looked at")
        let handed = try await store.endpointStatus(route)
        #expect(handed.backlog == 2 && handed.oldestPending == events[0].draft.occurredAt, "the events' age, not their deliveries': \(handed)")
        let first = try await store.claimDeliveries(endpoint: route.name, holder: "a", limit: 10, now: Date(), lease: .seconds(60))
        #expect(first.map(\.event.id) == events.map(\.id))
        // Redelivered while instance a sends it: left to a, not handed to b as well.
        try await store.enqueue([events[0]], endpoint: route.name, now: Date())
        #expect(try await store.claimDeliveries(endpoint: route.name, holder: "b", limit: 10, now: Date(), lease: .seconds(60)).isEmpty)
        try await store.finishAttempts(endpoint: route.name, holder: "a", Self.delivered(events))
        #expect(try await store.endpointStatus(route.name).backlog == 0, "a's outcome recorded, not lost to the reset")
        // Redelivered once delivered: sent again.
        try await store.enqueue([events[0]], endpoint: route.name, now: Date())
        let again = try await store.claimDeliveries(endpoint: route.name, holder: "b", limit: 10, now: Date(), lease: .seconds(60))
        #expect(again.map(\.event.id) == [events[0].id] && again.first?.attempts == 0)
        try await store.finishAttempts(endpoint: route.name, holder: "b", Self.delivered([events[0]]))
        // A replay ahead of the endpoint's cursor, delivered; the fan-out that reaches the event leaves it delivered.
        try await OutboxTests.buy("user-2", "coins.100", in: store, &fixture)
        _ = try await store.applyRecovered(try await fixture.verifiedNotifications(), watermark: nil)
        let third = try #require(try await OutboxTests.allEvents(store).last)
        try await store.enqueue([third], endpoint: route.name, now: Date())
        let replayed = try await store.claimDeliveries(endpoint: route.name, holder: "c", limit: 10, now: Date(), lease: .seconds(60))
        #expect(replayed.map(\.event.id) == [third.id])
        try await store.finishAttempts(endpoint: route.name, holder: "c", Self.delivered([third]))
        #expect(try await store.fanOut(route, limit: 10, now: Date()) == 1)
        #expect(try await store.claimDeliveries(endpoint: route.name, holder: "d", limit: 10, now: Date(), lease: .seconds(60)).isEmpty)
        // An event deleted since it was read (user-1 erased) gets no delivery from a replay that read it before: the
        // erasure's own event goes out, held back by nothing.
        let erased = try #require(try await store.erase(CustomerKey(bundleId: OutboxTests.app, environment: .sandbox, customerId: "user-1")))
        try await store.enqueue([events[1]], endpoint: route.name, now: Date())
        #expect(try await store.fanOut(route, limit: 10, now: Date()) == 1)
        let afterErasure = try await store.claimDeliveries(endpoint: route.name, holder: "e", limit: 10, now: Date(), lease: .seconds(60))
        #expect(afterErasure.map(\.event.id.description) == [erased.eventId], "\(afterErasure.map(\.event.type))")
        let status = try await store.endpointStatus(route.name)
        #expect(status.backlog == 1 && status.deadLettered == 0, "\(status)")
        await store.close()
    }

    @Test("a customer erased while an event of theirs is being sent: the erasure's event waits for that send to finish", arguments: Backend.available)
    func erasureWaitsForSend(backend: Backend) async throws {
        let route = WebhookRoute(name: "backend")
        let (store, _) = try await Self.storeBuying(["user-0"], on: backend, endpoint: route)
        _ = try await store.fanOut(route, limit: 10, now: Date())
        let sending = try await store.claimDeliveries(endpoint: route.name, holder: "a", limit: 10, now: Date(), lease: .seconds(60))
        try #require(sending.count == 1)
        let erased = try #require(try await store.erase(CustomerKey(bundleId: OutboxTests.app, environment: .sandbox, customerId: "user-0")))
        _ = try await store.fanOut(route, limit: 10, now: Date())
        #expect(try await store.claimDeliveries(endpoint: route.name, holder: "b", limit: 10, now: Date(), lease: .seconds(60)).isEmpty)
        try await store.finishAttempts(endpoint: route.name, holder: "a", Self.delivered(sending.map(\.event)))
        let next = try await store.claimDeliveries(endpoint: route.name, holder: "b", limit: 10, now: Date(), lease: .seconds(60))
        #expect(next.map(\.event.id.description) == [erased.eventId])
        await store.close()
    }

    @Test("a fan-out says how many events it looked at, matched or not: an endpoint of a quiet app pages on to the end", arguments: Backend.available)
    func fanOutPagesPastOtherApps(backend: Backend) async throws {
        let quiet = WebhookRoute(name: "quiet", bundleIds: ["com.example.quiet"])
        let (store, _) = try await Self.storeBuying(["user-0", "user-1", "user-2"], on: backend, endpoint: quiet)
        // Not handed over yet, the three count in the backlog of an endpoint that takes them, not in the quiet one's.
        let all = WebhookRoute(name: "all")
        _ = try await store.fanOut(all, limit: 0, now: Date())
        let before = try await store.endpointStatus(quiet)
        #expect(before.backlog == 0 && before.notHandedOver == 0, "\(before)")
        // (The route "all" started after them: it counts none. The quiet route's cursor is before them.)
        #expect(try await store.endpointStatus(all).backlog == 0)
        let everything = try await store.endpointStatus(WebhookRoute(name: "quiet"))
        #expect(everything.backlog == 3 && everything.notHandedOver == 3 && everything.oldestPending != nil, "\(everything)")
        // No page holds one of its events, yet each full page means more to look at.
        #expect(try await store.fanOut(quiet, limit: 2, now: Date()) == 2)
        #expect(try await store.fanOut(quiet, limit: 2, now: Date()) == 1)
        #expect(try await store.fanOut(quiet, limit: 2, now: Date()) == 0)
        #expect(try await store.endpointStatus("quiet").backlog == 0)
        await store.close()
    }
}
