import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperCore
import StorekeeperDemo
import StorekeeperSQLite
import StorekeeperTesting
import Synchronization
import Testing

@Suite("Storekeeper server: app API")
struct CustomerAPITests {
    typealias T = ServerTestbed

    static func body(_ jws: String) -> String { #"{"signedTransaction":"\#(jws)"}"# }

    /// A testbed whose simulator has sold alice a monthly subscription (not yet submitted to the server).
    static func aliceSubscribed() throws -> (T, LifecycleEngine.PurchaseResult) {
        var testbed = try T()
        try testbed.engine.createCustomer(id: "alice")
        return (testbed, try testbed.engine.purchase(.init(customerId: "alice", productId: "pro.monthly")))
    }

    @Test("the server issues a customer's app account token; a purchase made with it is the customer's by its notification alone")
    func issuedToken() async throws {
        var testbed = try T()
        let path = "/v1/customers/user-7/app-account-token"
        try await testbed.withClient { client in
            let issued = try await client.send(.post, path, key: T.appKey)
            #expect(issued.status == 200, "\(issued.json)")
            let token = try #require(issued.json["appAccountToken"] as? String)
            #expect(LowercaseUUID(uuidString: token)?.description == token)
            #expect(issued.json["bundleId"] as? String == "com.example.storekeeper" && issued.json["environment"] as? String == "Sandbox")
            #expect(try await client.send(.post, path, key: T.appKey).json["appAccountToken"] as? String == token, "the same until renewed")
            let renewed = try await client.send(.post, path + "?renew=true", key: T.appKey)
            #expect(renewed.status == 200 && renewed.json["appAccountToken"] as? String != token)
            // Another app's key gets its own app's token for the same customer ID.
            let other = try await client.send(.post, path, key: T.otherAppKey)
            #expect(other.json["bundleId"] as? String == "com.example.other" && other.json["appAccountToken"] as? String != token)
            // A key of one app that names another is refused (a write), not given its own app's token.
            let named = try await client.send(.post, path + "?bundleId=com.example.storekeeper", key: T.otherAppKey)
            #expect(named.status == 403 && (named.json["error"] as? [String: Any])?["code"] as? String == "other-app", "\(named.json)")
            // Refused, by name: no key, a body, an unknown or repeated parameter, a bad customer ID.
            #expect(try await client.send(.post, path).status == 401)
            let get = try await client.send(.get, path, key: T.appKey)
            #expect(get.status == 405 && get.allow == "POST", "\(get.json)")
            for (call, code) in [
                (try await client.send(.post, path, body: "{}", key: T.appKey), "malformed-body"),
                (try await client.send(.post, path + "?renw=true", key: T.appKey), "unknown-parameter"),
                (try await client.send(.post, path + "?renew=yes", key: T.appKey), "invalid-parameter"),
                (try await client.send(.post, "/v1/customers/a%20b/app-account-token", key: T.appKey), "invalid-customer-id"),
            ] {
                #expect(call.status == 400 && (call.json["error"] as? [String: Any])?["code"] as? String == code, "\(call.json)")
            }
        }
        // The app passes the renewed token to StoreKit; the purchase reaches the server only as a notification.
        let current = try await testbed.store.appAccountToken(for: "user-7", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        try testbed.engine.createCustomer(id: "apple-account")
        _ = try testbed.engine.purchase(.init(customerId: "apple-account", productId: "pro.monthly", appAccountToken: current))
        let jws = try #require(testbed.engine.state.notifications.last).signedPayload
        try await testbed.withClient { client in
            #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200)
            let read = try await client.send(.get, "/v1/customers/user-7", key: T.appKey)
            #expect((read.json["entitlements"] as? [[String: Any]])?.map { $0["entitlement"] as? String } == ["pro"], "\(read.json)")
        }
    }

    @Test("an app submits a transaction, reads the customer's state; submission is idempotent")
    func submitAndRead() async throws {
        let (testbed, purchase) = try Self.aliceSubscribed()
        try await testbed.withClient { client in
            let submitted = try await client.send(
                .post, "/v1/customers/user-42/transactions", body: Self.body(purchase.signedTransaction), key: T.appKey)
            #expect(submitted.status == 200, "\(submitted.json)")
            let entitlements = try #require(submitted.json["entitlements"] as? [[String: Any]])
            #expect(entitlements.map { $0["entitlement"] as? String } == ["pro"])
            #expect(entitlements.first?["source"] as? String == "app")
            let again = try await client.send(.post, "/v1/customers/user-42/transactions", body: Self.body(purchase.signedTransaction), key: T.appKey)
            #expect(again.status == 200)
            let read = try await client.send(.get, "/v1/customers/user-42?environment=Sandbox", key: T.appKey)
            #expect(read.status == 200)
            #expect((read.json["subscriptions"] as? [[String: Any]])?.count == 1)
            #expect(try await client.send(.get, "/v1/customers/nobody?environment=Sandbox", key: T.appKey).status == 404)
        }
    }

    @Test(
        "a submission's body is read strictly: a repeated key, a trailing comma, an unknown key or a wrong type is refused, naming it, and nothing is applied",
        arguments: [
            (#"{"signedTransaction": "%JWS%", "signedTransaction": "x"}"#, #"the key "signedTransaction" is given twice"#),
            (#"{"signedTransaction": "%JWS%",}"#, "no trailing comma"),
            (#"{"signedTransaction": "%JWS%", "customer": "bob"}"#, #"unknown key "customer""#),
            (#"{"signedTransactions": "%JWS%"}"#, #"did you mean "signedTransaction"?"#),
            // Five unknown keys fit in the answer; the keys known there are listed once, not for each.
            (
                #"{"signedTransaction": "%JWS%", "a1": 1, "a2": 2, "a3": 3, "a4": 4, "a5": 5, "a6": 6}"#,
                #"unknown key "a5" in the top level; and more unknown keys"#
            ),
            (#"{"signedTransaction": 42}"#, "expected a string, found the number 42"),
            (#"["%JWS%"]"#, "expected an object, found a list"),
        ])
    func strictSubmissionBody(template: String, named: String) async throws {
        let (testbed, purchase) = try Self.aliceSubscribed()
        try await testbed.withClient { client in
            let body = template.replacingOccurrences(of: "%JWS%", with: purchase.signedTransaction)
            let refused = try await client.send(.post, "/v1/customers/user-42/transactions", body: body, key: T.appKey)
            let error = refused.json["error"] as? [String: Any]
            #expect(refused.status == 400 && error?["code"] as? String == "malformed-body", "\(refused.json)")
            #expect((error?["message"] as? String)?.contains(named) == true, "\(refused.json)")
            #expect(try await client.send(.get, "/v1/customers/user-42?environment=Sandbox", key: T.appKey).status == 404, "nothing was applied")
        }
    }

    @Test("auth is required; one app's key cannot read or change another app's customers")
    func authorization() async throws {
        let (testbed, purchase) = try Self.aliceSubscribed()
        try await testbed.withClient { client in
            #expect(try await client.send(.get, "/v1/customers/user-42").status == 401)
            #expect(try await client.send(.get, "/v1/customers/user-42", key: "wrong").status == 401)
            // The scheme is case-insensitive; spaces and tabs around the key are ignored (RFC 9110's OWS), nothing else.
            for header in ["bearer \(T.appKey)", "BEARER  \(T.appKey) ", "Bearer \(T.appKey)", "Bearer \t \(T.appKey)\t"] {
                let answer = try await client.execute(
                    uri: "/v1/customers/nobody?environment=Sandbox", method: .get, headers: [.authorization: header]
                ) { $0.status }
                #expect(answer == .notFound, "\(header.prefix(7))")
            }
            for header in ["Bearer \(T.appKey)x", "Bearer x\(T.appKey)", "Bearer \u{A0}\(T.appKey)", "Bearer \(T.appKey.dropLast())", "Bearer "] {
                let answer = try await client.execute(
                    uri: "/v1/customers/nobody?environment=Sandbox", method: .get, headers: [.authorization: header]
                ) { $0.status }
                #expect(answer == .unauthorized, "\(header.prefix(7))")
            }
            let unknownScheme = try await client.execute(uri: "/v1/customers/nobody", method: .get, headers: [.authorization: "Basic \(T.appKey)"]) {
                $0.status
            }
            #expect(unknownScheme == .unauthorized)
            _ = try await client.send(.post, "/v1/customers/user-42/transactions", body: Self.body(purchase.signedTransaction), key: T.appKey)
            let foreign = try await client.send(.get, "/v1/customers/user-42?environment=Sandbox", key: T.otherAppKey)
            #expect(foreign.status == 404)
            let foreignSubmit = try await client.send(
                .post, "/v1/customers/user-43/transactions", body: Self.body(purchase.signedTransaction), key: T.otherAppKey)
            #expect(foreignSubmit.status == 403 && foreignSubmit.errorCode == "bundle-id-mismatch")
            let admin = try await client.send(.get, "/v1/customers/user-42?environment=Sandbox&bundleId=com.example.storekeeper", key: T.adminKey)
            #expect(admin.status == 200)
            #expect(
                try await client.send(.post, "/v1/customers/bad%20id/transactions", body: Self.body(purchase.signedTransaction), key: T.appKey).status
                    == 400)
            #expect(
                try await client.send(.post, "/v1/customers/u/transactions", body: #"{"signedTransaction":"x.y.z"}"#, key: T.appKey).status == 400)
        }
    }

    @Test("a customer with only consumables: the balance counts purchases less refunds, and another app's key sees nothing")
    func consumablesOnly() async throws {
        var testbed = try T()
        try testbed.engine.createCustomer(id: "carol")
        let first = try testbed.engine.purchase(.init(customerId: "carol", productId: "coins.100"))
        let second = try testbed.engine.purchase(.init(customerId: "carol", productId: "coins.100", quantity: 3))
        try testbed.engine.advance(by: 3_600)
        try testbed.engine.refund(transactionId: first.transactionId)
        let refunded = try testbed.engine.signTransaction(first.transactionId)
        try await testbed.withClient { client in
            for jws in [first.signedTransaction, second.signedTransaction, refunded] {
                #expect(try await client.send(.post, "/v1/customers/carol/transactions", body: Self.body(jws), key: T.appKey).status == 200)
            }
            let read = try await client.send(.get, "/v1/customers/carol?environment=Sandbox", key: T.appKey)
            #expect(read.status == 200)
            #expect(read.json["consumableBalance"] as? [String: Int] == ["coins.100": 3])
            #expect(try await client.send(.get, "/v1/customers/carol?environment=Sandbox", key: T.otherAppKey).status == 404)
        }
    }

    @Test("customer IDs are percent-decoded (a%40b is a@b) and invalid ones are refused with the ID named, on both routes")
    func customerIds() async throws {
        let (testbed, purchase) = try Self.aliceSubscribed()
        try await testbed.withClient { client in
            let submitted = try await client.send(
                .post, "/v1/customers/alice%40example.com/transactions", body: Self.body(purchase.signedTransaction), key: T.appKey)
            #expect(submitted.status == 200)
            #expect(submitted.json["customerId"] as? String == "alice@example.com")
            for path in ["alice@example.com", "alice%40example.com", "%61lice@example.com"] {
                let read = try await client.send(.get, "/v1/customers/\(path)?environment=Sandbox", key: T.appKey)
                #expect(read.status == 200, "\(path)")
                #expect(read.json["customerId"] as? String == "alice@example.com", "\(path)")
            }
            for (path, shown) in [
                ("bad%20id", "bad id"), ("%ZZ", "%ZZ"), ("caf%C3%A9", "café"),
                (String(repeating: "x", count: 129), String(repeating: "x", count: 64) + "…(65 more bytes)"),
            ] {
                for answer in [
                    try await client.send(.get, "/v1/customers/\(path)?environment=Sandbox", key: T.appKey),
                    try await client.send(.post, "/v1/customers/\(path)/transactions", body: Self.body(purchase.signedTransaction), key: T.appKey),
                ] {
                    #expect(answer.status == 400 && answer.errorCode == "invalid-customer-id", "\(path)")
                    #expect(
                        (answer.json["error"] as? [String: Any])?["message"] as? String
                            == "customer ID '\(shown)' is not valid: customer IDs are 1-128 ASCII letters, digits and -_.@:", "\(path)")
                }
            }
            // Without a key the answer is still 401, whatever the ID.
            #expect(try await client.send(.get, "/v1/customers/%ZZ").status == 401)
        }
    }
}

@Suite("Storekeeper demo")
struct DemoTests {
    @Test(
        "the demo plays every scenario through simulator and server, migrates customers from receipts, signs a win-back offer, and every customer matches the ground truth"
    )
    func demo() async throws {
        let lines = LineCollector()
        let rows = try await DemoRunner(print: { lines.add($0) }).run()
        #expect(rows.count == 10)
        #expect(rows.contains { $0.customerId == "legacy-ann" && $0.storekeeper == ["pro.yearly"] })
        #expect(rows.contains { $0.customerId == "winnie" && $0.storekeeper == ["pro.monthly"] })
        let mismatched = rows.filter { !$0.matches }.map(\.customerId)
        #expect(mismatched.isEmpty, "\(mismatched)")
        #expect(rows.contains { $0.customerId == "carol" && $0.groundTruth == ["coins.100 ×3"] })
        let text = lines.all.joined(separator: "\n")
        #expect(text.contains("notification DID_FAIL_TO_RENEW/GRACE_PERIOD → SUCCESS"))
        #expect(text.contains("delivered the held notifications, newest first"))
        #expect(text.contains("sent for mallory → 400: signature-invalid"))
        #expect(text.contains("the same signature again → refused"))
    }
}

final class LineCollector: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}
