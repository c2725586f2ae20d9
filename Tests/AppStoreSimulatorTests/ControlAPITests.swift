import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: control API")
struct ControlAPITests {
    static func control(
        _ client: some TestClientProtocol,
        _ method: HTTPRequest.Method,
        _ path: String,
        _ body: String? = nil
    ) async throws -> APIResult {
        try await client.call(method, "/simulator/v1" + path, body: body, token: "")
    }

    @Test("actions through the control API: customers, purchases, billing, clock, ground truth")
    func actions() async throws {
        let testbed = try APITestbed()
        try await testbed.withClient { client in
            #expect(try await Self.control(client, .post, "/customers", #"{"id":"alice","storefront":"GBR"}"#).status == 201)
            let purchase = try await Self.control(client, .post, "/purchases", #"{"customerId":"alice","productId":"pro.monthly"}"#)
            #expect(purchase.status == 200 && purchase.json["outcome"] as? String == "purchased")
            let signed = try #require(purchase.json["signedTransaction"] as? String)
            let verified = try await testbed.harness.verifier.verifyTransaction(signed)
            #expect(verified.payload.currency == "GBP" && verified.payload.price == 8990)
            #expect(try await Self.control(client, .post, "/customers/alice/billing", #"{"works":false}"#).status == 200)
            let clock = try await Self.control(client, .post, "/clock/advance", #"{"days":31}"#)
            #expect(clock.status == 200 && clock.json["now"] is NSNumber)
            let truth = try await Self.control(client, .get, "/customers/alice")
            let entitlements = try #require(truth.json["entitlements"] as? [[String: Any]])
            #expect(entitlements.first?["status"] as? Int == 4)  // in Billing Grace Period
            let faults = try await Self.control(client, .put, "/faults", #"{"failNextAPIRequests":2}"#)
            #expect(faults.json["failNextAPIRequests"] as? Int == 2)
            let scenario = try await Self.control(
                client, .post, "/scenarios?name=t", "customer bob\nbuy bob coins.100\nexpect-balance bob coins.100 1")
            #expect((scenario.json["events"] as? [String])?.count == 3)
        }
        let types = await testbed.simulator.state.notifications.map(\.notificationType)
        #expect(types == [.subscribed, .didFailToRenew, .oneTimeCharge])
    }

    @Test("malformed or refused control requests get clear 4xx errors and change nothing")
    func badRequests() async throws {
        let testbed = try APITestbed(setUp: SimulatorFixture.aliceSubscribes)
        let before = await testbed.simulator.state
        try await testbed.withClient { client in
            for (method, path, body, status, code, fragment) in [
                (HTTPRequest.Method.post, "/customers", "{not json", 400, "invalid-request", "not valid JSON"),
                (.post, "/customers", #"{"storefront":"USA"}"#, 400, "invalid-request", "missing field 'id'"),
                (.post, "/customers", #"{"id":"alice"}"#, 409, "conflict", "already exists"),
                (.post, "/customers", #"{"id":"zed","storefront":"XYZ"}"#, 400, "invalid-request", "unknown storefront"),
                (.post, "/purchases", #"{"customerId":"alice","productId":"nope"}"#, 404, "not-found", "no product 'nope'"),
                (.post, "/purchases", #"{"customerId":"alice","productId":"coins.100","quantity":"many"}"#, 400, "invalid-request", "quantity"),
                (.post, "/clock/advance", #"{"seconds":-5}"#, 400, "invalid-request", "seconds, days or to"),
                // Too small to move a millisecond clock; too far to be written back as epoch milliseconds (it crashed).
                (.post, "/clock/advance", #"{"days":1e-300}"#, 400, "invalid-request", "at least a millisecond"),
                (.post, "/clock/advance", #"{"days":1e12}"#, 400, "invalid-request", "before the year 10000"),
                (.post, "/clock/advance", #"{"days":36526}"#, 400, "invalid-request", "at most 100 years"),
                (.post, "/clock/advance", #"{"to":1e300}"#, 400, "invalid-request", "before the year 10000"),
                (.post, "/clock/advance", #"{"to":253402300800000}"#, 400, "invalid-request", "before the year 10000"),
                (.post, "/clock/advance", #"{"days":1,"to":1800000000000}"#, 400, "invalid-request", "not both"),
                (.post, "/transactions/123/refund", "{}", 404, "not-found", "no transaction '123'"),
                (.post, "/subscriptions/2000000000000001/auto-renew", #"{"enabled":true}"#, 409, "conflict", "already on"),
                (.put, "/faults", #"{"failNextAPIRequests":-1}"#, 400, "invalid-request", "0-1000000"),
                (.put, "/faults", #"{"rateLimitRetryAfterSeconds":0}"#, 400, "invalid-request", "1-3600"),
                (.put, "/config", #"{"notificationURL":"ftp://x"}"#, 400, "invalid-request", "http(s)"),
                (.post, "/scenarios", "fly away", 400, "invalid-request", "unknown step 'fly'"),
            ] {
                let result = try await Self.control(client, method, path, body)
                #expect(result.status == status, "\(path) \(body)")
                let error = result.json["error"] as? [String: Any]
                #expect(error?["code"] as? String == code, "\(path) \(body)")
                #expect((error?["message"] as? String)?.contains(fragment) == true, "\(path): \(error?["message"] ?? "")")
            }
        }
        let after = await testbed.simulator.state
        #expect(after.customers == before.customers)
        #expect(after.transactions == before.transactions)
        #expect(after.notifications == before.notifications)
        #expect(after.now == before.now)
    }
}
