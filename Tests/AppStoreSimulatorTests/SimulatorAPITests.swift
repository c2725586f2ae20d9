import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
import HashTreeCollections
import Hummingbird
import HummingbirdTesting
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: App Store Server API")
struct SimulatorAPITests {
    typealias H = SimulatorFixture

    @Test("tokens are checked like Apple: anything wrong is a 401 with no error code")
    func authentication() async throws {
        let testbed = try APITestbed(setUp: SimulatorFixture.aliceSubscribes)
        let other = P256KeyToken.make()
        try await testbed.withClient { client in
            let good = try await client.call(.get, "/inApps/v1/transactions/2000000000000001")
            #expect(good.status == 200)
            for token in [
                "", "not-a-token", other,
                P256KeyToken.make(lifetime: 3_601, key: TestAppStore.apiPrivateKey),
                P256KeyToken.make(lifetime: 300, key: TestAppStore.apiPrivateKey, audience: "appstoreconnect-v2"),
                P256KeyToken.make(lifetime: 300, key: TestAppStore.apiPrivateKey, algorithm: "ES384"),
                try APITestbed.token(issuedAt: Date().addingTimeInterval(-400)),
                try APITestbed.token(bundleId: "com.unknown.app"),
            ] {
                let result = try await client.call(.get, "/inApps/v1/transactions/2000000000000001", token: token)
                #expect(result.status == 401, "token \(token.prefix(12))")
                #expect(result.errorCode == nil)
                #expect(result.text.hasPrefix("Unauthenticated"))
            }
        }
    }

    @Test("Get Transaction Info: signed data, and Apple's errors")
    func transactionInfo() async throws {
        let testbed = try APITestbed(setUp: SimulatorFixture.aliceSubscribes)
        let appTransactionId = try #require(await testbed.simulator.state.customers["alice"]?.appTransactionIds[TestAppStore.bundleID])
        try await testbed.withClient { client in
            let ok = try await client.call(.get, "/inApps/v1/transactions/2000000000000001")
            let signed = try #require(ok.json["signedTransactionInfo"] as? String)
            let verified = try await testbed.harness.verifier.verifyTransaction(signed)
            #expect(verified.payload.productId == "pro.monthly")
            #expect(try await client.call(.get, "/inApps/v1/transactions/abc").errorCode == 4_000_006)
            #expect(try await client.call(.get, "/inApps/v1/transactions/999").errorCode == 4_040_010)
            let app = try await client.call(.get, "/inApps/v1/transactions/\(appTransactionId)")
            #expect(app.status == 400 && app.errorCode == 4_000_048)
            let appInfo = try await client.call(.get, "/inApps/v1/transactions/appTransactions/\(appTransactionId)")
            let appJWS = try #require(appInfo.json["signedAppTransactionInfo"] as? String)
            #expect(try await testbed.harness.verifier.verifyAppTransaction(appJWS).payload.appTransactionId == appTransactionId)
            #expect(try await client.call(.post, "/inApps/v1/transactions/2000000000000001/finish").status == 200)
        }
    }

    @Test("Get Transaction History: 20 per page, revision, repeated filters, any transaction ID")
    func historyPagination() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "carol")
            for _ in 0..<45 {
                _ = try engine.purchase(.init(customerId: "carol", productId: "coins.100"))
                try engine.advance(by: 1)
            }
            _ = try engine.purchase(.init(customerId: "carol", productId: "unlock.lifetime"))
        }
        try await testbed.withClient { client in
            var revision: String? = nil
            var seen: [String] = []
            var pages = 0
            repeat {
                let query = "productType=CONSUMABLE" + (revision.map { "&revision=\($0)" } ?? "")
                let page = try await client.call(.get, "/inApps/v2/history/2000000000000001?\(query)")
                #expect(page.status == 200)
                let transactions = try #require(page.json["signedTransactions"] as? [String])
                #expect(transactions.count <= 20)
                for jws in transactions {
                    seen.append(try await testbed.harness.verifier.verifyTransaction(jws).payload.transactionId)
                }
                revision = page.json["revision"] as? String
                pages += 1
                if page.json["hasMore"] as? Bool != true { break }
            } while pages < 10
            #expect(pages == 3)
            #expect(seen.count == 45 && Set(seen).count == 45)
            #expect(seen == seen.sorted())
            // A later page must repeat the same filters.
            let changed = try await client.call(.get, "/inApps/v2/history/2000000000000001?productType=NON_CONSUMABLE&revision=\(revision!)")
            #expect(changed.errorCode == 4_000_005)
            let all = try await client.call(
                .get, "/inApps/v2/history/2000000000000001?productType=CONSUMABLE&productType=NON_CONSUMABLE&sort=DESCENDING")
            let first = try #require((all.json["signedTransactions"] as? [String])?.first)
            #expect(try await testbed.harness.verifier.verifyTransaction(first).payload.productId == "unlock.lifetime")
            for (query, code) in [
                ("sort=UP", 4_000_021), ("productType=GAME", 4_000_022), ("inAppOwnershipType=STOLEN", 4_000_026),
                ("revoked=maybe", 4_000_030), ("startDate=yesterday", 4_000_015), ("startDate=5&endDate=5", 4_000_013),
                ("revision=garbage", 4_000_005), ("subscriptionGroupIdentifier=abc", 4_000_024),
            ] {
                let result = try await client.call(.get, "/inApps/v2/history/2000000000000001?\(query)")
                #expect(result.errorCode == code, "\(query)")
            }
            #expect(try await client.call(.get, "/inApps/v2/history/12345").errorCode == 4_040_010)
        }
    }

    @Test("Get All Subscription Statuses groups by subscription group and filters by status")
    func statuses() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "alice")
            _ = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
            let news = try engine.purchase(.init(customerId: "alice", productId: "news.weekly"))
            try engine.setAutoRenew(originalTransactionId: news.originalTransactionId, enabled: false)
            try engine.advance(by: 8 * 86_400)
        }
        try await testbed.withClient { client in
            let all = try await client.call(.get, "/inApps/v1/subscriptions/2000000000000001")
            let groups = try #require(all.json["data"] as? [[String: Any]])
            #expect(groups.map { $0["subscriptionGroupIdentifier"] as? String } == ["21000001", "21000002"])
            let active = try await client.call(.get, "/inApps/v1/subscriptions/2000000000000001?status=1")
            let activeGroups = try #require(active.json["data"] as? [[String: Any]])
            #expect(activeGroups.count == 1)
            let item = try #require((activeGroups[0]["lastTransactions"] as? [[String: Any]])?.first)
            #expect(item["status"] as? Int == 1)
            let renewal = try await testbed.harness.verifier.verifyRenewalInfo(try #require(item["signedRenewalInfo"] as? String))
            #expect(renewal.payload.autoRenewProductId == "pro.monthly")
            #expect(try await client.call(.get, "/inApps/v1/subscriptions/2000000000000001?status=9").errorCode == 4_000_031)
        }
    }

    @Test("Extend a Subscription Renewal Date: success and every documented error")
    func extend() async throws {
        let testbed = try APITestbed(setUp: SimulatorFixture.aliceSubscribes)
        try await testbed.withClient { client in
            let path = "/inApps/v1/subscriptions/extend/2000000000000001"
            let ok = try await client.call(.put, path, body: #"{"extendByDays":7,"extendReasonCode":3,"requestIdentifier":"r1"}"#)
            #expect(ok.status == 200 && ok.json["success"] as? Bool == true)
            #expect(ok.json["originalTransactionId"] as? String == "2000000000000001")
            #expect(ok.json["effectiveDate"] is NSNumber)
            for (body, code) in [
                (#"{"extendByDays":91,"extendReasonCode":3,"requestIdentifier":"r"}"#, 4_000_009),
                (#"{"extendByDays":0,"extendReasonCode":3,"requestIdentifier":"r"}"#, 4_000_009),
                (#"{"extendByDays":7,"extendReasonCode":4,"requestIdentifier":"r"}"#, 4_000_010),
                (#"{"extendByDays":7,"extendReasonCode":1}"#, 4_000_011),
                ("not json", 4_000_000),
            ] {
                #expect(try await client.call(.put, path, body: body).errorCode == code, "\(body)")
            }
            _ = try await client.call(.put, path, body: #"{"extendByDays":7,"extendReasonCode":3,"requestIdentifier":"r2"}"#)
            let third = try await client.call(.put, path, body: #"{"extendByDays":7,"extendReasonCode":3,"requestIdentifier":"r3"}"#)
            #expect(third.status == 403 && third.errorCode == 4_030_005)
            let unknown = try await client.call(
                .put, "/inApps/v1/subscriptions/extend/77", body: #"{"extendByDays":7,"extendReasonCode":3,"requestIdentifier":"r"}"#)
            #expect(unknown.errorCode == 4_040_005)
        }
    }

    @Test("mass extension runs, reports status, and refuses bad requests")
    func massExtension() async throws {
        let testbed = try APITestbed(setUp: SimulatorFixture.aliceSubscribes)
        try await testbed.withClient { client in
            let body = #"{"requestIdentifier":"m1","extendByDays":3,"extendReasonCode":1,"productId":"pro.monthly","storefrontCountryCodes":["USA"]}"#
            #expect(try await client.call(.post, "/inApps/v1/subscriptions/extend/mass", body: body).json["requestIdentifier"] as? String == "m1")
            #expect(try await client.call(.post, "/inApps/v1/subscriptions/extend/mass", body: body).status == 200)
            let status = try await client.call(.get, "/inApps/v1/subscriptions/extend/mass/pro.monthly/m1")
            #expect(status.json["complete"] as? Bool == true)
            #expect(status.json["succeededCount"] as? Int == 1 && status.json["failedCount"] as? Int == 0)
            #expect(try await client.call(.get, "/inApps/v1/subscriptions/extend/mass/pro.monthly/nope").errorCode == 4_040_009)
            let empty = #"{"requestIdentifier":"m2","extendByDays":3,"extendReasonCode":1,"productId":"pro.monthly","storefrontCountryCodes":[]}"#
            #expect(try await client.call(.post, "/inApps/v1/subscriptions/extend/mass", body: empty).errorCode == 4_000_027)
            let badCountry =
                #"{"requestIdentifier":"m3","extendByDays":3,"extendReasonCode":1,"productId":"pro.monthly","storefrontCountryCodes":["ZZZ"]}"#
            #expect(try await client.call(.post, "/inApps/v1/subscriptions/extend/mass", body: badCountry).errorCode == 4_000_028)
            let badProduct = #"{"requestIdentifier":"m4","extendByDays":3,"extendReasonCode":1,"productId":"coins.100"}"#
            #expect(try await client.call(.post, "/inApps/v1/subscriptions/extend/mass", body: badProduct).errorCode == 4_000_023)
        }
        let types = await testbed.simulator.state.notifications.map { "\($0.notificationType)/\($0.subtype?.rawValue ?? "")" }
        #expect(types.suffix(2) == ["RENEWAL_EXTENDED/", "RENEWAL_EXTENSION/SUMMARY"])
    }

    @Test("Send Consumption Information v2 and v1 validate every field and answer 202")
    func consumption() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "carol")
            _ = try engine.purchase(.init(customerId: "carol", productId: "coins.100"))
            _ = try engine.purchase(.init(customerId: "carol", productId: "pro.monthly"))
        }
        try await testbed.withClient { client in
            let v2 = "/inApps/v2/transactions/consumption/2000000000000001"
            #expect(
                try await client.call(
                    .put, v2,
                    body:
                        #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":25000,"refundPreference":"GRANT_PRORATED"}"#
                ).status == 202)
            for (body, code) in [
                (#"{"customerConsented":false,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#, 4_000_035),
                (#"{"customerConsented":true,"deliveryStatus":"LOST","sampleContentProvided":false}"#, 4_000_036),
                (#"{"customerConsented":true,"deliveryStatus":"DELIVERED"}"#, 4_000_041),
                (#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":true,"refundPreference":"MAYBE"}"#, 4_000_044),
            ] {
                #expect(try await client.call(.put, v2, body: body).errorCode == code, "\(body)")
            }
            let subscription = try await client.call(
                .put, "/inApps/v2/transactions/consumption/2000000000000002",
                body: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":10}"#)
            #expect(subscription.errorCode == 4_000_209)
            let v1 = "/inApps/v1/transactions/consumption/2000000000000001"
            let good =
                #"{"customerConsented":true,"consumptionStatus":2,"platform":1,"sampleContentProvided":false,"deliveryStatus":0,"appAccountToken":"","accountTenure":3,"playTime":2,"lifetimeDollarsRefunded":1,"lifetimeDollarsPurchased":2,"userStatus":1,"refundPreference":3}"#
            #expect(try await client.call(.put, v1, body: good).status == 202)
            #expect(
                try await client.call(.put, v1, body: good.replacingOccurrences(of: #""platform":1"#, with: #""platform":7"#)).errorCode == 4_000_039)
            #expect(
                try await client.call(.put, v1, body: good.replacingOccurrences(of: #""appAccountToken":"""#, with: #""appAccountToken":"x""#))
                    .errorCode == 4_000_033)
        }
        let stored = await testbed.simulator.state.consumptionInformation
        #expect(stored.count == 1)
        if case .object(let fields) = stored["2000000000000001"] {
            #expect(fields["platform"] == .integer(1))
        } else {
            Issue.record("consumption information was not stored")
        }
    }

    @Test("Set App Account Token: replaces the token; refuses bad UUIDs and non-original IDs")
    func appAccountToken() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "alice")
            _ = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
            try engine.advance(by: 32 * 86_400)
        }
        try await testbed.withClient { client in
            let token = "c0ffee00-1234-4abc-8def-0123456789ab"
            let good = "{\"appAccountToken\":\"" + token + "\"}"
            let path = "/inApps/v1/transactions/2000000000000001/appAccountToken"
            let set = try await client.call(.put, path, body: good)
            #expect(set.status == 200)
            let bad = try await client.call(.put, path, body: #"{"appAccountToken":"nope"}"#)
            #expect(bad.errorCode == 4_000_183)
            let renewal = try await client.call(.put, "/inApps/v1/transactions/2000000000000002/appAccountToken", body: good)
            #expect(renewal.errorCode == 4_000_187)
            let unknown = try await client.call(.put, "/inApps/v1/transactions/99/appAccountToken", body: good)
            #expect(unknown.errorCode == 4_040_005)
        }
        #expect(
            await testbed.simulator.state.transactions["2000000000000002"]?.info.appAccountToken?.description
                == "c0ffee00-1234-4abc-8def-0123456789ab")
    }

    @Test("refund history (v2 pages and v1) and Look Up Order ID (production only)")
    func refundsAndOrders() async throws {
        let testbed = try APITestbed(environment: .production) { engine in
            try engine.createCustomer(id: "carol")
            for _ in 0..<22 {
                let purchase = try engine.purchase(.init(customerId: "carol", productId: "coins.100"))
                try engine.advance(by: 1)
                try engine.refund(transactionId: purchase.transactionId)
            }
        }
        let orderId = try #require(await testbed.simulator.state.transactions["2000000000000001"]?.orderId)
        try await testbed.withClient { client in
            let first = try await client.call(.get, "/inApps/v2/refund/lookup/2000000000000001")
            #expect((first.json["signedTransactions"] as? [String])?.count == 20 && first.json["hasMore"] as? Bool == true)
            let revision = try #require(first.json["revision"] as? String)
            let second = try await client.call(.get, "/inApps/v2/refund/lookup/2000000000000001?revision=\(revision)")
            #expect((second.json["signedTransactions"] as? [String])?.count == 2 && second.json["hasMore"] as? Bool == false)
            #expect(try await client.call(.get, "/inApps/v2/refund/lookup/2000000000000001?revision=xyz").errorCode == 4_000_005)
            #expect((try await client.call(.get, "/inApps/v1/refund/lookup/2000000000000001").json["signedTransactions"] as? [String])?.count == 22)
            let order = try await client.call(.get, "/inApps/v1/lookup/\(orderId)")
            #expect(order.json["status"] as? Int == 0 && (order.json["signedTransactions"] as? [String])?.count == 1)
            #expect(try await client.call(.get, "/inApps/v1/lookup/MNOPE").json["status"] as? Int == 1)
        }
    }

    @Test("notification history: filters, onlyFailures, pagination and errors; test notifications")
    func notificationHistory() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "alice")
            try engine.createCustomer(id: "carol")
            _ = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
            for _ in 0..<25 { _ = try engine.purchase(.init(customerId: "carol", productId: "coins.100")) }
            try engine.recordDeliveryAttempt(notificationUUID: engine.state.notifications[0].notificationUUID, result: "TIMED_OUT")
            for record in engine.state.notifications.dropFirst() {
                try engine.recordDeliveryAttempt(notificationUUID: record.notificationUUID, result: "SUCCESS")
            }
        }
        let now = await testbed.simulator.state.now.epochMilliseconds
        let window = #""startDate":\#(now - 86_400_000),"endDate":\#(now + 1000)"#
        try await testbed.withClient { client in
            let page1 = try await client.call(.post, "/inApps/v1/notifications/history", body: "{\(window)}")
            #expect((page1.json["notificationHistory"] as? [[String: Any]])?.count == 20 && page1.json["hasMore"] as? Bool == true)
            let token = try #require(page1.json["paginationToken"] as? String)
            let page2 = try await client.call(.post, "/inApps/v1/notifications/history?paginationToken=\(token)", body: "{\(window)}")
            #expect((page2.json["notificationHistory"] as? [[String: Any]])?.count == 6 && page2.json["hasMore"] as? Bool == false)
            let failures = try await client.call(.post, "/inApps/v1/notifications/history", body: #"{\#(window),"onlyFailures":true}"#)
            let failed = try #require(failures.json["notificationHistory"] as? [[String: Any]])
            #expect(failed.count == 1)
            #expect((failed[0]["sendAttempts"] as? [[String: Any]])?.first?["sendAttemptResult"] as? String == "TIMED_OUT")
            let byCustomer = try await client.call(
                .post, "/inApps/v1/notifications/history", body: #"{\#(window),"transactionId":"2000000000000001"}"#)
            #expect((byCustomer.json["notificationHistory"] as? [[String: Any]])?.count == 1)
            for (body, code) in [
                (#"{\#(window),"transactionId":"2000000000000001","notificationType":"SUBSCRIBED"}"#, 4_000_019),
                (#"{\#(window),"notificationType":"NOT_A_TYPE"}"#, 4_000_018),
                (#"{\#(window),"notificationSubtype":"INITIAL_BUY"}"#, 4_000_018),
                (#"{"startDate":\#(now - 40 * 86_400_000),"endDate":\#(now)}"#, 4_000_012),
                (#"{"startDate":\#(now),"endDate":\#(now - 1)}"#, 4_000_013),
                (#"{"endDate":\#(now)}"#, 4_000_015),
            ] {
                #expect(try await client.call(.post, "/inApps/v1/notifications/history", body: body).errorCode == code, "\(body)")
            }
            #expect(try await client.call(.post, "/inApps/v1/notifications/history?paginationToken=abc", body: "{\(window)}").errorCode == 4_000_014)
            #expect(try await client.call(.post, "/inApps/v1/notifications/test").errorCode == 4_040_007)
        }
        _ = try await testbed.simulator.perform { engine in engine.state.notificationURL = "http://127.0.0.1:9/none" }
        try await testbed.withClient { client in
            let requested = try await client.call(.post, "/inApps/v1/notifications/test")
            let token = try #require(requested.json["testNotificationToken"] as? String)
            #expect(try await client.call(.get, "/inApps/v1/notifications/test/\(token)").errorCode == 4_040_008)
            let uuid = try #require(await testbed.simulator.state.notifications.last?.notificationUUID)
            try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.recordDeliveryAttempt(notificationUUID: uuid, result: "SUCCESS")
            }
            let status = try await client.call(.get, "/inApps/v1/notifications/test/\(token)")
            #expect((status.json["sendAttempts"] as? [[String: Any]])?.first?["sendAttemptResult"] as? String == "SUCCESS")
            #expect(try await client.call(.get, "/inApps/v1/notifications/test/unknowntoken").errorCode == 4_000_020)
        }
    }

    @Test("fault injection: 500 5000001, 429 4290000 with Retry-After, and Apple's rate limits")
    func faults() async throws {
        let testbed = try APITestbed(setUp: SimulatorFixture.aliceSubscribes)
        _ = try await testbed.simulator.perform { engine in
            engine.state.faults.failNextAPIRequests = 1
            engine.state.faults.rateLimitNextAPIRequests = 1
        }
        try await testbed.withClient { client in
            let failed = try await client.call(.get, "/inApps/v1/transactions/2000000000000001")
            #expect(failed.status == 500 && failed.errorCode == 5_000_001)
            let limited = try await client.call(.get, "/inApps/v1/transactions/2000000000000001")
            #expect(limited.status == 429 && limited.errorCode == 4_290_000)
            let retryAfter = try #require(limited.retryAfter.flatMap(Int64.init))
            #expect(retryAfter > Int64(Date().timeIntervalSince1970 * 1000) - 1000)
            #expect(try await client.call(.get, "/inApps/v1/transactions/2000000000000001").status == 200)
        }
        // The Retry-After of an injected 429 can be set further away.
        _ = try await testbed.simulator.perform { engine in
            engine.state.faults.rateLimitNextAPIRequests = 1
            engine.state.faults.rateLimitRetryAfterSeconds = 30
        }
        try await testbed.withClient { client in
            let limited = try await client.call(.get, "/inApps/v1/transactions/2000000000000001")
            let retryAfter = try #require(limited.retryAfter.flatMap(Int64.init))
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            #expect(retryAfter > now + 28_000 && retryAfter <= now + 30_000, "\(retryAfter - now) ms away")
        }
        _ = try await testbed.simulator.perform { engine in engine.state.faults.rateLimitsEnabled = true }
        try await testbed.withClient { client in
            // Sandbox allows 10 % of production's 10/s for order look-ups and refunds: 1 per second, with a bucket of
            // five. Fifteen at once (a starved machine would have to space them over ten seconds for none to be refused).
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<15 { group.addTask { try await client.call(.get, "/inApps/v1/refund/lookup/2000000000000001").status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 429 }.count >= 1)
        }
    }
}

extension SimulatorAPITests {
    @Test("family-shared and app transaction IDs are refused where Apple refuses them")
    func familyAndAppTransactionErrors() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "parent")
            try engine.createCustomer(id: "kid")
            try engine.formFamily(id: "f", members: ["parent", "kid"])
            _ = try engine.purchase(.init(customerId: "parent", productId: "family.monthly"))
        }
        let state = await testbed.simulator.state
        let copy = try #require(state.transactions.values.first { $0.info.inAppOwnershipType == .familyShared }?.info.transactionId)
        let appTransactionId = try #require(state.customers["parent"]?.appTransactionIds[TestAppStore.bundleID])
        try await testbed.withClient { client in
            let token = #"{"appAccountToken":"c0ffee00-1234-4abc-8def-0123456789ab"}"#
            let family = try await client.call(.put, "/inApps/v1/transactions/\(copy)/appAccountToken", body: token)
            #expect(family.errorCode == 4_000_185)
            let app = try await client.call(.put, "/inApps/v1/transactions/\(appTransactionId)/appAccountToken", body: token)
            #expect(app.errorCode == 4_000_048)
            let consumption = #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#
            let familyConsumption = try await client.call(.put, "/inApps/v2/transactions/consumption/\(copy)", body: consumption)
            #expect(familyConsumption.errorCode == 4_000_185)
            let appConsumption = try await client.call(.put, "/inApps/v2/transactions/consumption/\(appTransactionId)", body: consumption)
            #expect(appConsumption.errorCode == 4_000_048)
            let finish = try await client.call(.post, "/inApps/v1/transactions/\(appTransactionId)/finish")
            #expect(finish.errorCode == 4_000_048)
            let unknownFinish = try await client.call(.post, "/inApps/v1/transactions/42/finish")
            #expect(unknownFinish.errorCode == 4_040_010)
            let extendCopy = try await client.call(
                .put, "/inApps/v1/subscriptions/extend/\(copy)", body: #"{"extendByDays":3,"extendReasonCode":1,"requestIdentifier":"x"}"#
            )
            #expect(extendCopy.status == 403 && extendCopy.errorCode == 4_030_007)
            // Any ID of the customer works for history, including the app transaction ID.
            let history = try await client.call(.get, "/inApps/v2/history/\(appTransactionId)")
            #expect((history.json["signedTransactions"] as? [String])?.count == 1)
            let badOrder = try await client.call(.get, "/inApps/v1/lookup/not%20an%20order")
            #expect(badOrder.status == 404)  // sandbox: Look Up Order ID does not exist
            let valid = try await client.call(
                .get, "/inApps/v1/transactions/2000000000000001", token: P256KeyToken.make(lifetime: 600, key: TestAppStore.apiPrivateKey))
            #expect(valid.status == 200)
        }
    }
}

/// Tokens the simulator must refuse.
enum P256KeyToken {
    /// A token with any lifetime, audience or algorithm name, signed with `key`.
    static func make(lifetime: Int, key: P256.Signing.PrivateKey, audience: String = "appstoreconnect-v1", algorithm: String = "ES256") -> String {
        func encode(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let now = Int(Date().timeIntervalSince1970)
        let header = encode(#"{"alg":"\#(algorithm)","kid":"\#(TestAppStore.apiKeyInfo.keyId)","typ":"JWT"}"#)
        let claims = encode(
            #"{"iss":"\#(TestAppStore.apiKeyInfo.issuerId)","iat":\#(now),"exp":\#(now + lifetime),"aud":"\#(audience)","bid":"com.example.storekeeper"}"#
        )
        let signature = (try? key.signature(for: Data((header + "." + claims).utf8)))?.rawRepresentation ?? Data()
        return header + "." + claims + "."
            + signature.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// A token signed by a key the simulator does not know.
    static func make() -> String {
        let key = AppStoreAPIKey(
            issuerID: TestAppStore.apiKeyInfo.issuerId, keyID: TestAppStore.apiKeyInfo.keyId, bundleID: TestAppStore.bundleID,
            privateKey: .init()
        )
        return (try? APIAuthToken.make(key: key)) ?? ""
    }
}
