import AppStoreModels
import AppStoreSigning
import Foundation
import HashTreeCollections
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: refunds, family sharing, one-time products, notifications")
struct RefundFamilyOneTimeTests {
    typealias H = SimulatorFixture

    @Test("a full refund revokes a subscription (status 5); a reversal restores it")
    func refundAndReversal() async throws {
        var h = H()
        try h.customer("alice")
        let purchase = try h.buy("alice", "pro.monthly")
        try h.engine.refund(transactionId: purchase.transactionId, reason: .appIssue)
        var seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "REFUND 5"])
        let refunded = try #require(seen[1].transaction)
        #expect(refunded.revocationDate == h.engine.state.now)
        #expect(refunded.revocationReason == .appIssue)
        #expect(refunded.revocationType == .refundFull)
        #expect(refunded.revocationPercentage == 100_000)
        #expect(try h.engine.groundTruth(customerId: "alice").entitlements.isEmpty)
        try h.engine.reverseRefund(transactionId: purchase.transactionId)
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["REFUND_REVERSED 1"])
        #expect(seen[0].transaction?.revocationDate == nil && seen[0].transaction?.revocationPercentage == nil)
        #expect(seen[0].transaction?.expiresDate == refunded.expiresDate)
        #expect(try h.engine.groundTruth(customerId: "alice").entitlements.map(\.productId) == ["pro.monthly"])
    }

    @Test("a refund requested in the app: auto-renew off, consumption request, then declined or prorated")
    func refundRequest() async throws {
        var h = H()
        try h.customer("alice")
        let purchase = try h.buy("alice", "pro.monthly")
        try h.engine.requestRefund(transactionId: purchase.transactionId, reason: .unsatisfiedWithPurchase)
        try h.engine.declineRefund(transactionId: purchase.transactionId)
        #expect(throws: SimulatorError.self) { try h.engine.declineRefund(transactionId: purchase.transactionId) }
        try h.engine.requestRefund(transactionId: purchase.transactionId, reason: .fulfillmentIssue)
        try h.engine.refund(transactionId: purchase.transactionId, percentage: 40_000)
        let seen = try await h.newNotifications()
        #expect(
            seen.map(\.summary) == [
                "SUBSCRIBED/INITIAL_BUY 1", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED 1", "CONSUMPTION_REQUEST 1",
                "REFUND_DECLINED 1", "CONSUMPTION_REQUEST 1", "REFUND 5",
            ])
        #expect(seen[2].payload.data?.consumptionRequestReason == .unsatisfiedWithPurchase)
        #expect(seen[4].payload.data?.consumptionRequestReason == .fulfillmentIssue)
        #expect(seen[5].transaction?.revocationType == .refundProrated)
        #expect(seen[5].transaction?.revocationPercentage == 40_000)
    }

    @Test("consumables: ONE_TIME_CHARGE with quantity, a balance, and refunds")
    func consumables() async throws {
        var h = H()
        try h.customer("carol", storefront: "JPN")
        let first = try h.buy("carol", "coins.100", quantity: 3)
        try h.buy("carol", "coins.100")
        try h.engine.refund(transactionId: first.transactionId)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["ONE_TIME_CHARGE", "ONE_TIME_CHARGE", "REFUND"])
        #expect(seen[0].transaction?.quantity == 3)
        #expect(seen[0].transaction?.price == 450_000 && seen[0].transaction?.currency == "JPY")
        #expect(seen[0].transaction?.type == .consumable)
        #expect(seen[0].renewal == nil && seen[0].status == nil)
        #expect(try h.engine.groundTruth(customerId: "carol").consumableBalance == ["coins.100": 1])
    }

    @Test("non-consumables and non-renewing subscriptions; an offer code on a one-time product")
    func oneTimeProducts() async throws {
        var h = H()
        try h.customer("dave")
        try h.buy("dave", "unlock.lifetime", offer: "code.unlock-half")
        #expect(throws: SimulatorError.self) { try h.buy("dave", "unlock.lifetime") }
        try h.buy("dave", "season.pass")
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["ONE_TIME_CHARGE", "ONE_TIME_CHARGE"])
        #expect(seen[0].transaction?.offerType == .offerCode && seen[0].transaction?.offerDiscountType == .oneTime)
        #expect(seen[0].transaction?.price == 14_990)
        #expect(seen[1].transaction?.type == .nonRenewing && seen[1].transaction?.expiresDate == nil)
        #expect(try h.engine.groundTruth(customerId: "dave").entitlements.map(\.productId) == ["season.pass", "unlock.lifetime"])
        try h.advance(days: 95)
        #expect(try h.engine.groundTruth(customerId: "dave").entitlements.map(\.productId) == ["unlock.lifetime"])
    }

    @Test("family sharing: members get their own copies, follow renewals, and are revoked")
    func familySharing() async throws {
        var h = H()
        for name in ["parent", "kid", "teen"] { try h.customer(name) }
        try h.engine.formFamily(id: "smiths", members: ["parent", "kid"])
        let purchase = try h.buy("parent", "family.monthly")
        var seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "SUBSCRIBED/INITIAL_BUY 1"])
        let copy = try #require(seen[1].transaction)
        #expect(copy.inAppOwnershipType == .familyShared)
        #expect(copy.transactionId != purchase.transactionId && copy.originalTransactionId != purchase.originalTransactionId)
        #expect(copy.appTransactionId != seen[0].transaction?.appTransactionId)
        #expect(h.engine.state.transactions[copy.transactionId]?.customerId == "kid")

        try h.engine.formFamily(id: "smiths", members: ["teen"])
        try h.advance(days: 31)
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["SUBSCRIBED/INITIAL_BUY 1", "DID_RENEW 1", "DID_RENEW 1", "DID_RENEW 1"])
        #expect(seen[2].transaction?.originalTransactionId == copy.originalTransactionId)
        #expect(try h.engine.groundTruth(customerId: "kid").entitlements.map(\.ownership) == [.familyShared])

        try h.engine.leaveFamily(customerId: "teen")
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["REVOKE 5"])
        #expect(seen[0].transaction?.revocationType == .familyRevoke && seen[0].transaction?.revocationReason == .other)
        #expect(try h.engine.groundTruth(customerId: "teen").entitlements.isEmpty)

        let latest = try #require(h.engine.state.subscriptions[purchase.originalTransactionId]?.latestTransactionId)
        try h.engine.refund(transactionId: latest, reason: .appIssue)
        seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["REFUND 5", "REVOKE 5"])
        #expect(seen[1].transaction?.revocationReason == .appIssue)
        #expect(try h.engine.groundTruth(customerId: "kid").entitlements.isEmpty)
    }

    @Test("family-shared non-consumables: ONE_TIME_CHARGE for members; stopping sharing revokes")
    func familyNonConsumable() async throws {
        var h = H()
        for name in ["parent", "kid"] { try h.customer(name) }
        try h.engine.formFamily(id: "f", members: ["parent", "kid"])
        let purchase = try h.buy("parent", "unlock.lifetime")
        try h.engine.stopSharing(transactionId: purchase.transactionId)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["ONE_TIME_CHARGE", "ONE_TIME_CHARGE", "REVOKE"])
        #expect(seen[1].transaction?.inAppOwnershipType == .familyShared)
        #expect(try h.engine.groundTruth(customerId: "kid").entitlements.isEmpty)
        #expect(try h.engine.groundTruth(customerId: "parent").entitlements.map(\.productId) == ["unlock.lifetime"])
    }

    @Test("a family-shared copy cannot be extended directly; the purchaser's extension extends it")
    func familyExtension() async throws {
        var h = H()
        for name in ["parent", "kid"] { try h.customer(name) }
        try h.engine.formFamily(id: "f", members: ["parent", "kid"])
        let purchase = try h.buy("parent", "family.monthly")
        let copyId = try #require(h.engine.state.subscriptions[purchase.originalTransactionId]?.familyCopies["kid"])
        let error = #expect(throws: SimulatorError.self) { try h.engine.extendRenewalDate(originalTransactionId: copyId, days: 5) }
        #expect(error?.apiErrorCode == 4_030_007)
        let result = try h.engine.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, days: 5)
        #expect(h.engine.state.subscriptions[copyId]?.expiresDate == result.effectiveDate)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary).suffix(2) == ["RENEWAL_EXTENDED 1", "RENEWAL_EXTENDED 1"])
    }

    @Test("TEST notifications carry the app and environment and no transaction; production adds appAppleId")
    func testNotification() async throws {
        var h = H(environment: .production)
        let token = try h.engine.requestTestNotification(bundleId: TestAppStore.bundleID)
        let seen = try await h.newNotifications()
        #expect(seen.map(\.summary) == ["TEST"])
        #expect(seen[0].payload.data?.signedTransactionInfo == nil)
        #expect(seen[0].payload.data?.appAppleId == 6_450_000_001)
        #expect(seen[0].payload.data?.environment == .production)
        #expect(h.engine.state.notifications[0].testNotificationToken == token)
    }

    @Test("production retries failed deliveries at 1, 12, 24, 48 and 72 hours, 6 attempts in all")
    func productionRetrySchedule() throws {
        var h = H(environment: .production)
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        let uuid = h.engine.state.notifications[0].notificationUUID
        var attemptTimes: [Date] = []
        for _ in 0..<20 {
            guard let due = h.engine.dueNotifications().first else {
                guard let next = h.engine.state.notifications[0].nextAttemptAt else { break }
                try h.engine.advance(to: next)
                continue
            }
            attemptTimes.append(h.engine.state.now)
            try h.engine.recordDeliveryAttempt(notificationUUID: due.notificationUUID, result: "UNSUCCESSFUL_HTTP_RESPONSE_CODE")
        }
        let gaps = zip(attemptTimes.dropFirst(), attemptTimes).map { $0.timeIntervalSince($1) / 3600 }
        #expect(gaps == [1, 12, 24, 48, 72])
        #expect(h.engine.state.notifications[0].sendAttempts.count == 6)
        #expect(h.engine.state.notifications[0].nextAttemptAt == nil)
        #expect(h.engine.state.notifications[0].isFailure)
        #expect(h.engine.state.notifications.first { $0.notificationUUID == uuid } != nil)
    }

    @Test("sandbox sends each notification once; a success stops retries")
    func sandboxNoRetry() throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "pro.monthly")
        let uuid = h.engine.state.notifications[0].notificationUUID
        try h.engine.recordDeliveryAttempt(notificationUUID: uuid, result: "TIMED_OUT")
        #expect(h.engine.state.notifications[0].nextAttemptAt == nil)
        var p = H(environment: .production)
        try p.customer("bob")
        try p.buy("bob", "pro.monthly")
        let id = p.engine.state.notifications[0].notificationUUID
        try p.engine.recordDeliveryAttempt(notificationUUID: id, result: "SUCCESS")
        #expect(p.engine.state.notifications[0].nextAttemptAt == nil)
        #expect(!p.engine.state.notifications[0].isFailure)
    }

    @Test("the ground truth keeps the highest level per group, across purchased and family-shared access")
    func highestLevel() async throws {
        var h = H()
        try h.customer("alice")
        try h.buy("alice", "basic.monthly")
        try h.buy("alice", "premium.monthly")
        try h.buy("alice", "news.weekly")
        let truth = try h.engine.groundTruth(customerId: "alice")
        #expect(truth.entitlements.map(\.productId) == ["news.weekly", "premium.monthly"])
    }
}
