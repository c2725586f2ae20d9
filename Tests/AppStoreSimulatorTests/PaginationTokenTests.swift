import AppStoreModels
import Foundation
import Hummingbird
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

/// A pagination token (notification history) or revision (transaction history) is bound to what the request means,
/// not to how its JSON or query string is spelled.
@Suite("Simulator: pagination tokens follow the request's meaning")
struct PaginationTokenTests {
    /// 26 notifications (a subscription, 25 consumables), so history has two pages.
    static func testbed() throws -> APITestbed {
        try APITestbed { engine in
            try engine.createCustomer(id: "alice")
            try engine.createCustomer(id: "carol")
            _ = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
            for _ in 0..<25 { _ = try engine.purchase(.init(customerId: "carol", productId: "coins.100")) }
        }
    }

    @Test("notification history: page 2 with keys reordered, whitespace changed or a default spelled out works; another filter is refused")
    func notificationHistory() async throws {
        let testbed = try Self.testbed()
        let now = await testbed.simulator.now.epochMilliseconds
        let start = now - 86_400_000
        let end = now + 1000
        try await testbed.withClient { client in
            let page1 = try await client.call(.post, "/inApps/v1/notifications/history", body: #"{"startDate": \#(start), "endDate": \#(end)}"#)
            #expect((page1.json["notificationHistory"] as? [[String: Any]])?.count == 20)
            let token = try #require(page1.json["paginationToken"] as? String)
            let path = "/inApps/v1/notifications/history?paginationToken=\(token)"
            for same in [
                #"{"endDate":\#(end),"startDate":\#(start)}"#,
                "{\n  \"startDate\" : \(start),\n  \"endDate\" : \(end)\n}\n",
                #"{"startDate":\#(start),"onlyFailures":false,"endDate":\#(end)}"#,
            ] {
                let page2 = try await client.call(.post, path, body: same)
                #expect(page2.status == 200, "\(same)")
                #expect((page2.json["notificationHistory"] as? [[String: Any]])?.count == 6, "\(same)")
                #expect(page2.json["hasMore"] as? Bool == false, "\(same)")
            }
            for other in [
                #"{"startDate":\#(start),"endDate":\#(end),"notificationType":"ONE_TIME_CHARGE"}"#,
                #"{"startDate":\#(start),"endDate":\#(end + 1)}"#,
                #"{"startDate":\#(start),"endDate":\#(end),"onlyFailures":true}"#,
                #"{"startDate":\#(start),"endDate":\#(end),"transactionId":"2000000000000002"}"#,
            ] {
                #expect(try await client.call(.post, path, body: other).errorCode == 4_000_014, "\(other)")
            }
        }
    }

    @Test("transaction history: the next page with parameters reordered, repeated or spelled otherwise works; other filters are refused")
    func transactionHistory() async throws {
        let testbed = try Self.testbed()
        try await testbed.withClient { client in
            let base = "/inApps/v2/history/2000000000000002"
            let page1 = try await client.call(.get, base + "?productType=CONSUMABLE&startDate=1000&revoked=false")
            #expect((page1.json["signedTransactions"] as? [String])?.count == 20 && page1.json["hasMore"] as? Bool == true)
            let revision = try #require(page1.json["revision"] as? String)
            for same in [
                "revoked=FALSE&startDate=01000&productType=CONSUMABLE",
                "productType=CONSUMABLE&productType=CONSUMABLE&startDate=1000&revoked=false&sort=ASCENDING",
            ] {
                let page2 = try await client.call(.get, base + "?\(same)&revision=\(revision)")
                #expect(page2.status == 200, "\(same)")
                #expect((page2.json["signedTransactions"] as? [String])?.count == 5, "\(same)")
            }
            for other in [
                "productType=CONSUMABLE&startDate=1001&revoked=false",
                "productType=CONSUMABLE&productType=AUTO_RENEWABLE&startDate=1000&revoked=false",
                "productType=CONSUMABLE&startDate=1000",
                "productType=CONSUMABLE&startDate=1000&revoked=false&sort=DESCENDING",
            ] {
                #expect(try await client.call(.get, base + "?\(other)&revision=\(revision)").errorCode == 4_000_005, "\(other)")
            }
        }
    }
}
