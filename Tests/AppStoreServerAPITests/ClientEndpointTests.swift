import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import Foundation
import HashTreeCollections
import Logging
import StorekeeperTesting
import Testing

@Suite("API client: every endpoint against the simulator over loopback")
struct ClientEndpointTests {
    typealias L = LiveSimulator

    static func customerWithHistory(_ engine: inout LifecycleEngine) throws {
        try engine.createCustomer(id: "carol")
        for _ in 0..<43 {
            _ = try engine.purchase(.init(customerId: "carol", productId: "coins.100"))
            try engine.advance(by: 1)
        }
        _ = try engine.purchase(.init(customerId: "carol", productId: "pro.monthly"))
        for id in ["2000000000000001", "2000000000000002", "2000000000000003"] {
            try engine.refund(transactionId: id)
            try engine.advance(by: 1)
        }
    }

    @Test("transactions: info, history (every page, filters, v1), statuses, app transaction, finish, token")
    func transactions() async throws {
        let live = try L(setUp: Self.customerWithHistory)
        try await live.serve { url in
            let client = live.client(url)
            let info = try await client.transactionInfo("2000000000000010")
            #expect(try await live.verifier.verifyTransaction(info.signedTransactionInfo).payload.productId == "coins.100")

            let pages = try await client.transactionHistory("2000000000000001").all()
            #expect(pages.map(\.signedTransactions.count) == [20, 20, 4])
            #expect(pages.last?.hasMore == false)
            var query = TransactionHistoryQuery()
            query.productTypes = [.autoRenewable]
            query.sort = .descending
            let subscriptions = try await client.transactionHistory("2000000000000001", query: query).all()
            #expect(subscriptions.flatMap(\.signedTransactions).count == 1)
            query = TransactionHistoryQuery()
            query.revoked = true
            #expect(try await client.transactionHistory("2000000000000001", query: query).all().flatMap(\.signedTransactions).count == 3)
            #expect(try await client.transactionHistory("2000000000000001", version: .v1).all().count == 3)

            let statuses = try await client.allSubscriptionStatuses("2000000000000001", status: [.active])
            #expect(statuses.data.first?.lastTransactions.first?.status == .active)
            let appTransaction = try await client.appTransactionInfo("2000000000000001")
            #expect(try await live.verifier.verifyAppTransaction(appTransaction.signedAppTransactionInfo).payload.bundleId == TestAppStore.bundleID)
            try await client.finishTransaction("2000000000000005")
            try await client.setAppAccountToken("2000000000000044", token: LowercaseUUID(uuidString: "c0ffee00-1234-4abc-8def-0123456789ab")!)
        }
        #expect(await live.simulator.state.transactions["2000000000000005"]?.finished == true)
    }

    @Test("refunds: v2 pages and v1; extensions single and mass; consumption v2 and v1")
    func refundsExtensionsConsumption() async throws {
        let live = try L(setUp: Self.customerWithHistory)
        try await live.serve { url in
            let client = live.client(url)
            let refunds = try await client.refundHistory("2000000000000001").all()
            #expect(refunds.flatMap(\.signedTransactions).count == 3)
            #expect(try await client.refundLookupV1("2000000000000001").signedTransactions.count == 3)
            let extended = try await client.extendRenewalDate(
                "2000000000000044", .init(extendByDays: 5, extendReasonCode: .serviceIssueOrOutage, requestIdentifier: "outage-1"))
            #expect(extended.success == true && extended.originalTransactionId == "2000000000000044")
            let mass = try await client.extendRenewalDatesForAllActiveSubscribers(
                .init(requestIdentifier: "m-1", extendByDays: 2, extendReasonCode: .customerSatisfaction, productId: "pro.monthly")
            )
            #expect(mass.requestIdentifier == "m-1")
            let status = try await client.massExtensionStatus(productId: "pro.monthly", requestIdentifier: "m-1")
            #expect(status.complete == true && status.succeededCount == 1)
            try await client.sendConsumptionInformation(
                "2000000000000010",
                .init(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 100_000)
            )
            try await client.sendConsumptionInformationV1(
                "2000000000000011",
                .init(
                    customerConsented: true, consumptionStatus: 3, platform: 1, sampleContentProvided: false, deliveryStatus: 0,
                    appAccountToken: "", accountTenure: 2, playTime: 3, lifetimeDollarsRefunded: 1, lifetimeDollarsPurchased: 2, userStatus: 1)
            )
        }
        #expect(await live.simulator.state.consumptionInformation.count == 2)
    }

    @Test("notification history pages with the same body; test notification and its status; order look-up in production")
    func notifications() async throws {
        let live = try L(environment: .production, setUp: Self.customerWithHistory)
        _ = try await live.simulator.perform { engine in engine.setNotificationURL("http://127.0.0.1:9/none") }
        let orderId = try #require(await live.simulator.state.transactions["2000000000000007"]?.orderId)
        try await live.serve { url in
            let client = live.client(url)
            let request = NotificationHistoryRequest(
                startDate: TestAppStore.start.addingTimeInterval(-86_400), endDate: TestAppStore.start.addingTimeInterval(86_400))
            let pages = try await client.notificationHistory(request).all()
            #expect(pages.map(\.notificationHistory.count) == [20, 20, 7])
            let first = try #require(pages.first?.notificationHistory.first)
            #expect(try await live.verifier.verifyNotification(first.signedPayload).payload.notificationType == .oneTimeCharge)
            let typed = NotificationHistoryRequest(
                startDate: request.startDate, endDate: request.endDate, notificationType: .refund
            )
            #expect(try await client.notificationHistory(typed).all().flatMap(\.notificationHistory).count == 3)
            let test = try await client.requestTestNotification()
            let notYet = await #expect(throws: AppStoreServerAPIError.self) { try await client.testNotificationStatus(test.testNotificationToken) }
            #expect(notYet?.errorCode == 4_040_008)
            for token in ["../x", "a\nb", "a/b", ".."] {
                let refused = await #expect(throws: AppStoreServerAPIError.self) { try await client.testNotificationStatus(token) }
                #expect(refused?.kind == .invalidRequest && refused?.httpStatus == nil, "\(token)")
            }
            let order = try await client.lookUpOrder(orderId)
            #expect(order.status == 0 && order.signedTransactions?.count == 1)
        }
    }

    @Test("Apple's errors arrive as typed errors with the code, its name and the status, without retries")
    func errorsMapped() async throws {
        let live = try L(setUp: Self.customerWithHistory)
        try await live.serve { url in
            let client = live.client(url)
            for attempt in 1...2 {
                _ = try await client.extendRenewalDate(
                    "2000000000000044", .init(extendByDays: 1, extendReasonCode: .other, requestIdentifier: "x\(attempt)"))
            }
            let cases: [(String, Int, Int, String)] = [
                ("transactionInfo", 404, 4_040_010, "TransactionIdNotFoundError"),
                ("extend-max", 403, 4_030_005, "SubscriptionMaxExtensionError"),
                ("extend-consumable", 404, 4_040_005, "OriginalTransactionIdNotFoundError"),
                ("massStatus", 404, 4_040_009, "StatusRequestNotFoundError"),
                ("testNotification", 404, 4_040_007, "ServerNotificationURLNotFoundError"),
                ("consumptionAutoRenewable", 400, 4_000_209, "ConsumptionPercentageAutoRenewableSubscriptionError"),
            ]
            for (name, status, code, errorName) in cases {
                do throws(AppStoreServerAPIError) {
                    switch name {
                    case "transactionInfo": _ = try await client.transactionInfo("999999")
                    case "extend-max":
                        _ = try await client.extendRenewalDate(
                            "2000000000000044", .init(extendByDays: 1, extendReasonCode: .other, requestIdentifier: "x3"))
                    case "extend-consumable":
                        _ = try await client.extendRenewalDate(
                            "2000000000000001", .init(extendByDays: 1, extendReasonCode: .other, requestIdentifier: "x"))
                    case "massStatus": _ = try await client.massExtensionStatus(productId: "pro.monthly", requestIdentifier: "nope")
                    case "testNotification": _ = try await client.requestTestNotification()
                    default:
                        try await client.sendConsumptionInformation(
                            "2000000000000044",
                            .init(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: true, consumptionPercentage: 10))
                    }
                    Issue.record("\(name) succeeded")
                } catch {
                    #expect(error.kind == .apiError, "\(name)")
                    #expect(error.httpStatus == status && error.errorCode == code, "\(name): \(error)")
                    #expect(error.errorName == errorName)
                    #expect(error.attempts == 1, "\(name) was retried")
                    #expect(!error.isRetryable)
                }
            }
        }
    }

    @Test("bad requests are refused before sending, with clear messages")
    func validation() async throws {
        let live = try L()
        let client = live.client("http://127.0.0.1:1")
        let checks: [(String, @Sendable () async throws -> Void)] = [
            ("1-20 digits", { _ = try await client.transactionInfo("12ab") }),
            ("1-90", { _ = try await client.extendRenewalDate("1", .init(extendByDays: 91, extendReasonCode: .other, requestIdentifier: "r")) }),
            (
                "not 0-3",
                { _ = try await client.extendRenewalDate("1", .init(extendByDays: 9, extendReasonCode: .init(rawValue: 7), requestIdentifier: "r")) }
            ),
            (
                "1-128 characters",
                {
                    _ = try await client.extendRenewalDate(
                        "1", .init(extendByDays: 9, extendReasonCode: .other, requestIdentifier: String(repeating: "x", count: 129)))
                }
            ),
            (
                "must not be empty",
                {
                    _ = try await client.extendRenewalDatesForAllActiveSubscribers(
                        .init(requestIdentifier: "r", extendByDays: 1, extendReasonCode: .other, productId: "p", storefrontCountryCodes: []))
                }
            ),
            (
                "alpha-3",
                {
                    _ = try await client.extendRenewalDatesForAllActiveSubscribers(
                        .init(requestIdentifier: "r", extendByDays: 1, extendReasonCode: .other, productId: "p", storefrontCountryCodes: ["us"]))
                }
            ),
            (
                "customerConsented must be true",
                {
                    try await client.sendConsumptionInformation(
                        "1", .init(customerConsented: false, deliveryStatus: .delivered, sampleContentProvided: false))
                }
            ),
            (
                "must be 0 when",
                {
                    try await client.sendConsumptionInformation(
                        "1", .init(customerConsented: true, deliveryStatus: .undeliveredOther, sampleContentProvided: false, consumptionPercentage: 5)
                    )
                }
            ),
            (
                "not both",
                {
                    _ = try client.notificationHistory(
                        .init(startDate: Date(), endDate: Date().addingTimeInterval(9), notificationType: .refund, transactionId: "1"))
                }
            ),
            (
                "needs notificationType",
                {
                    _ = try client.notificationHistory(
                        .init(startDate: Date(), endDate: Date().addingTimeInterval(9), notificationSubtype: .voluntary))
                }
            ),
            ("before endDate", { _ = try client.notificationHistory(.init(startDate: TestAppStore.start, endDate: TestAppStore.start)) }),
            ("letters and digits", { _ = try await client.lookUpOrder("../etc") }),
            ("is not 1-5", { _ = try await client.allSubscriptionStatuses("1", status: [.init(rawValue: 9)]) }),
        ]
        for (fragment, call) in checks {
            do {
                try await call()
                Issue.record("'\(fragment)' was not refused")
            } catch let error as AppStoreServerAPIError {
                #expect(error.kind == .invalidRequest, "\(fragment): \(error)")
                #expect(error.attempts == 0)
                #expect(error.message.contains(fragment), "\(error.message)")
            }
        }
    }
}

@Suite("API client: signed fields returned verified")
struct ClientVerifiedTests {
    typealias L = LiveSimulator

    @Test("verified transactions, history pages, statuses, refunds, app transaction and notifications")
    func verified() async throws {
        let live = try L(setUp: ClientEndpointTests.customerWithHistory)
        let verifier = live.verifier
        try await live.serve { url in
            let client = live.client(url)
            #expect(try await client.transaction("2000000000000004", verifier: verifier).payload.productId == "coins.100")
            let pages = try await client.transactions("2000000000000001", verifier: verifier).all()
            #expect(pages.flatMap { $0 }.count == 44)
            #expect(Set(pages.flatMap { $0 }.map(\.payload.transactionId)).count == 44)
            let statuses = try await client.subscriptionStatuses("2000000000000001", verifier: verifier)
            #expect(statuses.map(\.renewalInfo.payload.autoRenewProductId) == ["pro.monthly"])
            #expect(try await client.refunds("2000000000000001", verifier: verifier).all().flatMap { $0 }.count == 3)
            #expect(try await client.appTransaction("2000000000000001", verifier: verifier).payload.bundleId == TestAppStore.bundleID)
            let window = NotificationHistoryRequest(
                startDate: TestAppStore.start.addingTimeInterval(-3600), endDate: TestAppStore.start.addingTimeInterval(86_400),
                transactionId: "2000000000000044")
            let notifications = try await client.notifications(window, verifier: verifier).all().flatMap { $0 }
            #expect(notifications.count == 47)

            // A verifier that does not trust the simulator's root: every call fails as a verification error.
            let apple = SignedDataVerifier(configuration: .unsafeSkippingClaimChecks())
            let error = await #expect(throws: AppStoreServerAPIError.self) { try await client.transaction("2000000000000004", verifier: apple) }
            #expect(error?.kind == .verification)
            #expect((error?.underlying as? VerificationError)?.code == .untrustedRoot)
        }
    }
}
