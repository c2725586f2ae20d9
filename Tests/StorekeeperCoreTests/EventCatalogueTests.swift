import AppStoreModels
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

/// Each event's `changes` hold what the catalogue (Events.md) gives for its type, and nothing of another type's.
@Suite("Events: each type's changes are the catalogue's", .dropsTestDatabases)
struct EventCatalogueTests {
    static let subject: Set<String> = ["originalTransactionId", "productId"]
    static let purchase: Set<String> = ["transactionId", "originalTransactionId", "productId"]
    static let revocation: Set<String> = ["revocationDate", "revocationReason"]

    /// The fields an event of each type may carry in `changes`.
    static let allowed: [EventType: Set<String>] = [
        .subscriptionStarted: subject.union(["transactionId", "from"]),
        .subscriptionRenewed: subject.union(["previousExpiresDate", "expiresDate"]),
        .subscriptionBillingIssue: subject,
        .subscriptionGracePeriodStarted: subject,
        .subscriptionBillingRecovered: subject.union(["previousExpiresDate", "expiresDate"]),
        .subscriptionExpired: subject.union(["reason"]),
        .subscriptionProductChanged: subject.union(["previousProductId", "direction"]),
        .subscriptionRenewalProductChanged: subject.union(["autoRenewProductId", "previousAutoRenewProductId"]),
        .subscriptionAutoRenewDisabled: subject,
        .subscriptionAutoRenewEnabled: subject,
        .subscriptionRenewalExtended: subject.union(["previousExpiresDate", "expiresDate"]),
        .subscriptionPriceIncrease: subject.union(["priceIncreaseStatus"]),
        .subscriptionOfferRedeemed: subject.union(["offerType", "offerIdentifier", "transactionId"]),
        .subscriptionStatusChanged: subject.union(["status"]),
        .purchaseCompleted: purchase,
        .purchaseExpired: purchase,
        .purchaseRefunded: purchase.union(revocation),
        // A consumable's reversal says how many units came back.
        .purchaseRefundReversed: purchase.union(["quantity"]),
        .purchaseRevoked: purchase.union(revocation),
        .consumableGranted: purchase.union(["quantity"]),
        .consumableRefunded: purchase.union(["quantity"]).union(revocation),
        .customerTransferredIn: purchase.union(["from"]),
        .customerTransferredOut: purchase.union(["to"]),
        .customerUpdated: subject,
    ]

    @Test(
        "every shipped scenario: no event's changes carry another type's fields (a renewal's dates stay out of the auto-renew event after it)",
        arguments: ShippedScenarios.all.map(\.name))
    func changesPerType(name: String) async throws {
        var fixture = SimulatorFixture()
        try await fixture.play(name)
        let store = try await Backend.sqlite.makeStore()
        let end = fixture.engine.state.now
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { end })
        try await fixture.submitAll(to: store)
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        let events = try await OutboxTests.allEvents(store)
        #expect(!events.isEmpty)
        for event in events {
            let allowed = try #require(Self.allowed[event.type], "\(event.type) is not in the catalogue's table")
            let extra = Set(event.draft.changes.keys).subtracting(allowed)
            #expect(extra.isEmpty, "\(name): \(event.type.rawValue) carries \(extra.sorted())")
        }
        await store.close()
    }
}
