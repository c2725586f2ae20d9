import AppStoreModels
import AppStoreSigning
import Foundation
import HashTreeCollections
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: subscription lifecycles")
struct SubscriptionLifecycleTests {
    typealias H = SimulatorFixture

    @Test("a first purchase subscribes: transaction and renewal info as Apple signs them")
    func subscribe() async throws {
        var h = H()
        try h.customer("alice")
        let result = try h.buy("alice", "pro.monthly")
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1"])
        let transaction = try #require(seen[0].transaction)
        #expect(transaction.transactionId == transaction.originalTransactionId)
        #expect(transaction.transactionId == result.transactionId)
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.type == .autoRenewable)
        #expect(transaction.productId == "pro.monthly")
        #expect(transaction.subscriptionGroupIdentifier == "21000001")
        #expect(transaction.purchaseDate == TestAppStore.start)
        #expect(transaction.expiresDate == TestAppStore.start.addingTimeInterval(31 * 86_400))  // 2026-05-28 → 06-28
        #expect(transaction.price == 9990 && transaction.currency == "USD")
        #expect(transaction.storefront == "USA" && transaction.storefrontId == "143441")
        #expect(transaction.inAppOwnershipType == .purchased)
        #expect(transaction.environment == .sandbox)
        #expect(transaction.webOrderLineItemId != nil && transaction.appTransactionId != nil)
        let renewal = try #require(seen[0].renewal)
        #expect(renewal.autoRenewStatus == .on)
        #expect(renewal.autoRenewProductId == "pro.monthly")
        #expect(renewal.renewalDate == transaction.expiresDate)
        #expect(renewal.renewalPrice == 9990)
        // What the app gets from StoreKit verifies too.
        let signed = try await h.verifier.verifyTransaction(result.signedTransaction)
        #expect(signed.payload.transactionId == result.transactionId)
    }

    @Test("renewals make new transactions under the same original ID, starting at the previous expiry")
    func renew() async throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        _ = try await h.newNotifications()
        try h.advance(days: 65)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["DID_RENEW 1", "DID_RENEW 1"])
        let first = try #require(seen[0].transaction)
        let second = try #require(seen[1].transaction)
        #expect(first.transactionReason == .renewal)
        #expect(first.originalTransactionId == second.originalTransactionId)
        #expect(first.transactionId != second.transactionId)
        #expect(second.purchaseDate == first.expiresDate)
        #expect(first.webOrderLineItemId != second.webOrderLineItemId)
    }

    @Test("auto-renew off, expiry, auto-renew on, resubscribe")
    func cancelAndResubscribe() async throws {
        var h = H()
        try h.customer("alice")
        let purchase = try h.buy("alice", "pro.monthly")
        try h.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: false)
        try h.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: true)
        try h.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: false)
        try h.advance(days: 40)
        let seen = try await h.newNotifications()
        #expect(
            seen.map(\.summary) == [
                "SUBSCRIBED/INITIAL_BUY 1", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED 1",
                "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED 1", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED 1",
                "EXPIRED/VOLUNTARY 2",
            ])
        #expect(seen[1].renewal?.autoRenewStatus == .off)
        #expect(seen[4].renewal?.expirationIntent == .customerCancelled)
        let again = try h.buy("alice", "pro.monthly")
        #expect(again.originalTransactionId == purchase.originalTransactionId)
        #expect(try await h.newSummaries() == ["SUBSCRIBED/RESUBSCRIBE 1"])
    }

    @Test("billing failure with grace: grace, grace expired, billing retry ends after 60 days")
    func billingFailureWithGrace() async throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        try h.engine.setBilling(customerId: "alice", works: false)
        try h.advance(days: 31)
        var seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "DID_FAIL_TO_RENEW/GRACE_PERIOD 4"])
        let expiry = try #require(seen[0].transaction?.expiresDate)
        #expect(seen[1].renewal?.isInBillingRetryPeriod == true)
        #expect(seen[1].renewal?.expirationIntent == .billingError)
        #expect(seen[1].renewal?.gracePeriodExpiresDate == expiry.addingTimeInterval(16 * 86_400))
        #expect(try h.engine.groundTruth(customerId: "alice").entitlements.map(\.productId) == ["pro.monthly"])
        try h.advance(days: 16)
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["GRACE_PERIOD_EXPIRED 3"])
        #expect(seen[0].renewal?.isInBillingRetryPeriod == true)
        #expect(try h.engine.groundTruth(customerId: "alice").entitlements.isEmpty)
        try h.advance(days: 60)
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["EXPIRED/BILLING_RETRY 2"])
        #expect(seen[0].renewal?.isInBillingRetryPeriod == false)
    }

    @Test("billing failure without grace, then recovery in billing retry")
    func billingRecovery() async throws {
        var h = H()
        try h.customer("bob")
        try h.buy("bob", "news.weekly")
        try h.engine.setBilling(customerId: "bob", works: false)
        try h.advance(days: 8)
        try h.engine.setBilling(customerId: "bob", works: true)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "DID_FAIL_TO_RENEW 3", "DID_RENEW/BILLING_RECOVERY 1"])
        let recovered = try #require(seen[2].transaction)
        #expect(recovered.purchaseDate == h.engine.state.now)
        #expect(recovered.expiresDate == h.engine.state.now.addingTimeInterval(7 * 86_400))
        #expect(seen[2].renewal?.isInBillingRetryPeriod == nil)
    }

    @Test("recovery inside Billing Grace Period keeps the renewal date")
    func recoveryInGrace() async throws {
        var h = H()
        try h.customer("alice")
        let purchase = try h.buy("alice", "pro.monthly")
        let expiry = try #require(h.engine.state.subscriptions[purchase.originalTransactionId]?.expiresDate)
        try h.engine.setBilling(customerId: "alice", works: false)
        try h.advance(days: 33)
        try h.engine.setBilling(customerId: "alice", works: true)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary).suffix(2) == ["DID_FAIL_TO_RENEW/GRACE_PERIOD 4", "DID_RENEW/BILLING_RECOVERY 1"])
        #expect(seen.last?.transaction?.purchaseDate == expiry)
    }

    @Test("upgrade is immediate and marks the old transaction upgraded")
    func upgrade() async throws {
        var h = H()
        try h.customer("alice")
        let first = try h.buy("alice", "pro.monthly")
        try h.advance(days: 10)
        let upgrade = try h.buy("alice", "premium.monthly")
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "DID_CHANGE_RENEWAL_PREF/UPGRADE 1"])
        let transaction = try #require(seen[1].transaction)
        #expect(transaction.productId == "premium.monthly")
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.originalTransactionId == first.originalTransactionId)
        #expect(transaction.purchaseDate == h.engine.state.now)
        #expect(upgrade.outcome == "upgraded")
        #expect(h.engine.state.transactions[first.transactionId]?.info.isUpgraded == true)
        #expect(try h.engine.groundTruth(customerId: "alice").entitlements.map(\.productId) == ["premium.monthly"])
    }

    @Test("downgrade and different-duration crossgrade wait for the next renewal; buying the current product reverts")
    func downgrade() async throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        #expect(try h.buy("alice", "basic.monthly").outcome == "downgrade-scheduled")
        #expect(try h.buy("alice", "pro.monthly").outcome == "downgrade-cancelled")
        #expect(try h.buy("alice", "pro.yearly").outcome == "downgrade-scheduled")
        var seen = try await h.newNotifications()
        #expect(
            seen.map(\.summary) == [
                "SUBSCRIBED/INITIAL_BUY 1", "DID_CHANGE_RENEWAL_PREF/DOWNGRADE 1", "DID_CHANGE_RENEWAL_PREF 1",
                "DID_CHANGE_RENEWAL_PREF/DOWNGRADE 1",
            ])
        #expect(seen[1].renewal?.autoRenewProductId == "basic.monthly")
        #expect(seen[1].renewal?.productId == "pro.monthly")
        #expect(seen[2].renewal?.autoRenewProductId == "pro.monthly")
        try h.advance(days: 31)
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["DID_RENEW 1"])
        #expect(seen[0].transaction?.productId == "pro.yearly")
        #expect(seen[0].transaction?.transactionReason == .renewal)
    }

    @Test("an introductory free trial: offer fields, free, one week; only once per group")
    func introductoryOffer() async throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "pro.monthly", offer: "intro.trial")
        let seen = try await h.newNotifications()
        let transaction = try #require(seen[0].transaction)
        #expect(transaction.offerType == .introductory)
        #expect(transaction.offerIdentifier == nil)
        #expect(transaction.offerDiscountType == .freeTrial)
        #expect(transaction.offerPeriod == "P1W")
        #expect(transaction.price == 0)
        #expect(transaction.expiresDate == TestAppStore.start.addingTimeInterval(7 * 86_400))
        try h.advance(days: 7)
        let renewal = try await h.newNotifications()
        #expect(renewal.map(\.summary) == ["DID_RENEW 1"])
        #expect(renewal[0].transaction?.price == 9990 && renewal[0].transaction?.offerType == nil)
        #expect(throws: SimulatorError.self) { try h.buy("alice", "pro.yearly", offer: "intro.trial") }
    }

    @Test("a promotional offer on an active subscription applies from the next renewals; win-back only when lapsed")
    func promotionalAndWinBack() async throws {
        var h = H()
        try h.customer("alice")
        let purchase = try h.buy("alice", "pro.monthly")
        let error = #expect(throws: SimulatorError.self) { try h.buy("alice", "pro.monthly", offer: "winback.month") }
        #expect(error?.code == .conflict)
        #expect(try h.buy("alice", "pro.monthly", offer: "promo.half").outcome == "offer-redeemed")
        try h.advance(days: 31)
        var seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "OFFER_REDEEMED 1", "DID_RENEW 1"])
        #expect(seen[1].renewal?.offerType == .promotional && seen[1].renewal?.offerIdentifier == "promo.half")
        #expect(seen[2].transaction?.price == 4990 && seen[2].transaction?.offerIdentifier == "promo.half")
        try h.engine.setAutoRenew(originalTransactionId: purchase.originalTransactionId, enabled: false)
        try h.advance(days: 40)
        try h.buy("alice", "pro.monthly", offer: "winback.month")
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary).suffix(2) == ["EXPIRED/VOLUNTARY 2", "SUBSCRIBED/RESUBSCRIBE 1"])
        #expect(seen.last?.transaction?.offerType == .winBack && seen.last?.transaction?.price == 1990)
    }

    @Test("price increase: consent needed, not given → expires; given → renews at the new price")
    func priceIncrease() async throws {
        var h = H()
        try h.customer("alice")
        try h.customer("bob")
        let alice = try h.buy("alice", "pro.monthly")
        try h.buy("bob", "pro.monthly")
        try h.engine.announcePriceIncrease(productId: "pro.monthly", newPrices: ["USA": 12_990], consentRequired: true)
        try h.engine.consentToPriceIncrease(originalTransactionId: alice.originalTransactionId)
        try h.advance(days: 31)
        let seen = try await h.newNotifications()
        #expect(
            seen.map(\.summary) == [
                "SUBSCRIBED/INITIAL_BUY 1", "SUBSCRIBED/INITIAL_BUY 1", "PRICE_INCREASE/PENDING 1", "PRICE_INCREASE/PENDING 1",
                "PRICE_INCREASE/ACCEPTED 1", "DID_RENEW 1", "EXPIRED/PRICE_INCREASE 2",
            ])
        #expect(seen[2].renewal?.priceIncreaseStatus == .pending && seen[2].renewal?.renewalPrice == 12_990)
        #expect(seen[4].renewal?.priceIncreaseStatus == .accepted)
        #expect(seen[5].transaction?.price == 12_990)
        #expect(seen[6].renewal?.expirationIntent == .didNotConsentToPriceIncrease)
    }

    @Test("a price increase without consent is accepted at once; a product off sale expires at renewal")
    func priceIncreaseWithoutConsentAndRemoval() async throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "news.weekly")
        try h.engine.announcePriceIncrease(productId: "news.weekly", newPrices: ["USA": 2_490], consentRequired: false)
        try h.engine.removeFromSale(productId: "news.weekly")
        try h.advance(days: 8)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "PRICE_INCREASE/ACCEPTED 1", "EXPIRED/PRODUCT_NOT_FOR_SALE 2"])
        #expect(seen[2].renewal?.expirationIntent == .productUnavailable)
        #expect(throws: SimulatorError.self) { try h.buy("alice", "news.weekly") }
    }

    @Test("renewal-date extension: moves the expiry, at most twice a year, never for retry, trials or family copies")
    func renewalExtension() async throws {
        var h = H()
        try h.customer("alice")
        try h.customer("bob")
        let purchase = try h.buy("alice", "pro.monthly")
        let before = try #require(h.engine.state.subscriptions[purchase.originalTransactionId]?.expiresDate)
        let result = try h.engine.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, days: 7)
        #expect(result.effectiveDate == before.addingTimeInterval(7 * 86_400))
        _ = try h.engine.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, days: 90)
        let third = #expect(throws: SimulatorError.self) {
            try h.engine.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, days: 1)
        }
        #expect(third?.apiErrorCode == 4_030_005)
        let days = #expect(throws: SimulatorError.self) {
            try h.engine.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, days: 91)
        }
        #expect(days?.apiErrorCode == 4_000_009)
        let trial = try h.buy("bob", "pro.monthly", offer: "intro.trial")
        let ineligible = #expect(throws: SimulatorError.self) {
            try h.engine.extendRenewalDate(originalTransactionId: trial.originalTransactionId, days: 3)
        }
        #expect(ineligible?.apiErrorCode == 4_030_004)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary).filter { $0.hasPrefix("RENEWAL_EXTENDED") } == ["RENEWAL_EXTENDED 1", "RENEWAL_EXTENDED 1"])
        #expect(seen[2].transaction?.expiresDate == before.addingTimeInterval(97 * 86_400))
    }

    /// alice subscribed to pro.monthly, and the state's JSON (keys sorted) at that point.
    static func subscriberAndSnapshot() throws -> (H, JSONEncoder, Data) {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return (h, encoder, try encoder.encode(h.engine.state))
    }

    @Test("a failed action changes nothing")
    func atomicity() throws {
        var (h, encoder, before) = try Self.subscriberAndSnapshot()
        #expect(throws: SimulatorError.self) { try h.buy("alice", "no.such.product") }
        #expect(throws: SimulatorError.self) { try h.buy("nobody", "pro.monthly") }
        #expect(throws: SimulatorError.self) { try h.buy("alice", "coins.100", quantity: 11) }
        #expect(throws: SimulatorError.self) { try h.engine.advance(to: TestAppStore.start.addingTimeInterval(-1)) }
        #expect(throws: SimulatorError.self) { try h.engine.refund(transactionId: "42") }
        #expect(throws: SimulatorError.self) { try h.engine.createCustomer(id: "alice") }
        #expect(throws: SimulatorError.self) { try h.engine.createCustomer(id: "carol", storefront: "XXX") }
        #expect(try encoder.encode(h.engine.state) == before)
    }

    @Test("an action that fails after changing the state and sending notifications rolls all of it back")
    func rollbackAfterChanges() throws {
        var (h, encoder, before) = try Self.subscriberAndSnapshot()
        let sent = h.engine.state.notifications.count
        let failure = #expect(throws: SimulatorError.self) {
            try h.engine.transaction { (engine) throws(SimulatorError) -> Void in
                try engine.createCustomer(id: "bob")
                _ = try engine.purchase(.init(customerId: "bob", productId: "coins.100"))
                _ = try engine.purchase(.init(customerId: "alice", productId: "unlock.lifetime"))
                #expect(engine.state.notifications.count == sent + 2)
                throw SimulatorError(.conflict, "injected after the changes")
            }
        }
        #expect(failure?.message == "injected after the changes")
        #expect(try encoder.encode(h.engine.state) == before)
        // The engine goes on from the old state: the next purchase is the next notification, bob does not exist.
        try h.buy("alice", "coins.100")
        #expect(h.engine.state.notifications.count == sent + 1)
        #expect(h.engine.state.customers["bob"] == nil)
    }

    @Test("sandbox at an accelerated rate renews 12 times, then turns auto-renew off")
    func sandboxRenewalLimit() async throws {
        var h = H(rate: .sandbox5Minutes)
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        try h.engine.advance(by: 14 * 300)
        let summaries = try await h.newSummaries()
        #expect(summaries.filter { $0 == "DID_RENEW 1" }.count == 12)
        #expect(summaries.last == "EXPIRED/VOLUNTARY 2")
        var real = H()
        try real.customer("bob")
        try real.buy("bob", "news.weekly")
        try real.advance(days: 7 * 14)
        #expect(try await real.newSummaries().filter { $0 == "DID_RENEW 1" }.count == 14)
    }

    @Test("sandbox speed: a month lasts 5 minutes, grace 5 minutes, billing retry 10 minutes")
    func sandboxRate() async throws {
        var h = H(rate: .sandbox5Minutes)
        try h.customer("alice")
        let purchase = try h.buy("alice", "pro.monthly")
        let transaction = try #require(h.engine.state.transactions[purchase.transactionId]?.info)
        #expect(transaction.expiresDate == TestAppStore.start.addingTimeInterval(300))
        try h.engine.setBilling(customerId: "alice", works: false)
        try h.engine.advance(by: 300)
        try h.engine.advance(by: 300)
        try h.engine.advance(by: 300)
        #expect(
            try await h.newSummaries() == [
                "SUBSCRIBED/INITIAL_BUY 1", "DID_FAIL_TO_RENEW/GRACE_PERIOD 4", "GRACE_PERIOD_EXPIRED 3", "EXPIRED/BILLING_RETRY 2",
            ])
    }
}
