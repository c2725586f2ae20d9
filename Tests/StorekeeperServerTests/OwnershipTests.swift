import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperServer
import StorekeeperTesting
import Testing

/// Who owns a purchase: a token is one customer's within one app and environment, a submission never moves anything
/// from one customer to another, and nobody learns of a customer their app has no data for.
@Suite("Storekeeper server: ownership and isolation")
struct OwnershipTests {
    typealias T = ServerTestbed

    static func transaction(_ jws: String) -> String { #"{"signedTransaction":"\#(jws)"}"# }
    static func notification(_ jws: String) -> String { #"{"signedPayload":"\#(jws)"}"# }

    /// The customer's answer: entitlements' product IDs, non-consumables and consumable balance.
    struct View: Equatable {
        var status: Int
        var products: [String] = []
        var nonConsumables: [String] = []
        var coins: [String: Int] = [:]

        init(_ answer: Answer) {
            status = answer.status
            products = ((answer.json["entitlements"] as? [[String: Any]]) ?? []).compactMap { $0["productId"] as? String }.sorted()
            nonConsumables = (answer.json["nonConsumables"] as? [String]) ?? []
            coins = (answer.json["consumableBalance"] as? [String: Int]) ?? [:]
        }
    }

    static func view(
        _ client: some TestClientProtocol, _ customer: String, key: String = T.appKey, query: String = "environment=Sandbox"
    ) async throws -> View {
        View(try await client.send(.get, "/v1/customers/\(customer)?\(query)", key: key))
    }

    @Test("the outside test's reproduction: eve's app submitting a purchase made with alice's token gets 409 and moves nothing")
    func tokenCannotMovePurchases() async throws {
        var testbed = try T()
        let ta = LowercaseUUID(UUID())
        for customer in ["alice", "eve"] { try testbed.engine.createCustomer(id: customer) }
        let pro = try testbed.engine.purchase(.init(customerId: "alice", productId: "pro.monthly", appAccountToken: ta))
        _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "unlock.lifetime", appAccountToken: ta))
        for _ in 0..<5 { _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "coins.100", appAccountToken: ta)) }
        let alicesNotifications = testbed.engine.state.notifications.map(\.signedPayload)
        let evesCoin = try testbed.engine.purchase(.init(customerId: "eve", productId: "coins.100", appAccountToken: ta))
        let evesNotification = try #require(testbed.engine.state.notifications.last?.signedPayload)
        try await testbed.withClient { client in
            #expect(
                try await client.send(.post, "/v1/customers/alice/transactions", body: Self.transaction(pro.signedTransaction), key: T.appKey).status
                    == 200)
            for jws in alicesNotifications {
                #expect(try await client.send(.post, "/appstore/notifications", body: Self.notification(jws)).status == 200)
            }
            let alice = try await Self.view(client, "alice")
            #expect(alice.products == ["pro.monthly", "unlock.lifetime"] && alice.nonConsumables == ["unlock.lifetime"])
            #expect(alice.coins == ["coins.100": 5])

            let refused = try await client.send(
                .post, "/v1/customers/eve/transactions", body: Self.transaction(evesCoin.signedTransaction), key: T.appKey)
            #expect(refused.status == 409 && refused.errorCode == "token-owned-by-another-customer", "\(refused.json)")
            let message = (refused.json["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(message.contains(ta.description) && !message.contains("alice"), "the conflict names the token, never its owner: \(message)")
            #expect(try await Self.view(client, "alice") == alice)
            #expect(try await Self.view(client, "eve").status == 404)

            // Eve's purchase, delivered by its notification, carries alice's token: it is attributed by that token
            // (the README's rule), and nothing of alice's moves.
            #expect(try await client.send(.post, "/appstore/notifications", body: Self.notification(evesNotification)).status == 200)
            var after = alice
            after.coins = ["coins.100": 6]
            #expect(try await Self.view(client, "alice") == after)
            #expect(try await Self.view(client, "eve").status == 404)

            // Nor can anyone take a purchase by submitting its signed transaction for themselves.
            let stolen = try await client.send(.post, "/v1/customers/eve/transactions", body: Self.transaction(pro.signedTransaction), key: T.appKey)
            #expect(stolen.status == 409 && stolen.errorCode == "token-owned-by-another-customer", "\(stolen.json)")
            #expect(try await Self.view(client, "alice") == after)
            // The owner submitting again is idempotent.
            #expect(
                try await client.send(.post, "/v1/customers/alice/transactions", body: Self.transaction(pro.signedTransaction), key: T.appKey).status
                    == 200)
        }
    }

    @Test("a purchase linked to a customer cannot be submitted for another, with or without a token")
    func linkedPurchaseStays() async throws {
        var testbed = try T()
        for customer in ["alice", "eve"] { try testbed.engine.createCustomer(id: customer) }
        let unlock = try testbed.engine.purchase(.init(customerId: "alice", productId: "unlock.lifetime"))
        try await testbed.withClient { client in
            #expect(
                try await client.send(.post, "/v1/customers/alice/transactions", body: Self.transaction(unlock.signedTransaction), key: T.appKey)
                    .status == 200)
            let stolen = try await client.send(
                .post, "/v1/customers/eve/transactions", body: Self.transaction(unlock.signedTransaction), key: T.adminKey)
            #expect(stolen.status == 409 && stolen.errorCode == "purchase-owned-by-another-customer", "\(stolen.json)")
            #expect(try await Self.view(client, "alice").nonConsumables == ["unlock.lifetime"])
            #expect(try await Self.view(client, "eve").status == 404)
        }
    }

    @Test("tokens belong to a customer of one app: app A's key submitting a purchase with app B's customer's token moves nothing of B's")
    func tokensArePerApp() async throws {
        var testbed = try T(catalog: T.twoApps)
        let tb = LowercaseUUID(UUID())
        for customer in ["bob", "mallory"] { try testbed.engine.createCustomer(id: customer) }
        let bobsUnlock = try testbed.engine.purchase(.init(customerId: "bob", productId: "other.unlock", appAccountToken: tb))
        let bobsNotification = try #require(testbed.engine.state.notifications.last?.signedPayload)
        let mallorysCoin = try testbed.engine.purchase(.init(customerId: "mallory", productId: "coins.100", appAccountToken: tb))
        try await testbed.withClient { client in
            #expect(
                try await client.send(
                    .post, "/v1/customers/bob/transactions", body: Self.transaction(bobsUnlock.signedTransaction), key: T.otherAppKey
                ).status == 200)
            #expect(try await client.send(.post, "/appstore/notifications", body: Self.notification(bobsNotification)).status == 200)
            let bob = try await Self.view(client, "bob", key: T.otherAppKey)
            #expect(bob.status == 200 && bob.nonConsumables == ["other.unlock"])
            // The same UUID in app A is another token, free there: mallory's submission is hers.
            let submitted = try await client.send(
                .post, "/v1/customers/mallory/transactions", body: Self.transaction(mallorysCoin.signedTransaction), key: T.appKey)
            #expect(submitted.status == 200, "\(submitted.json)")
            #expect(try await Self.view(client, "mallory").coins == ["coins.100": 1])
            #expect(try await Self.view(client, "bob", key: T.otherAppKey) == bob)
            #expect(try await Self.view(client, "mallory", key: T.otherAppKey).status == 404)
            // An admin reading bob in app A, where he has nothing, gets 404 too.
            #expect(try await Self.view(client, "bob", key: T.adminKey, query: "environment=Sandbox&bundleId=com.example.storekeeper").status == 404)
        }
    }

    @Test(
        "an admin key reads the app its bundleId names; without it on a server of several apps the read is refused naming them, and an unknown app is named"
    )
    func adminReadsNameTheirApp() async throws {
        var testbed = try T(catalog: T.twoApps)
        try testbed.engine.createCustomer(id: "bob")
        let bobsUnlock = try testbed.engine.purchase(.init(customerId: "bob", productId: "other.unlock"))
        try await testbed.withClient { client in
            #expect(
                try await client.send(
                    .post, "/v1/customers/bob/transactions", body: Self.transaction(bobsUnlock.signedTransaction), key: T.otherAppKey
                ).status == 200)
            let named = try await Self.view(client, "bob", key: T.adminKey, query: "environment=Sandbox&bundleId=com.example.other")
            #expect(named.status == 200 && named.nonConsumables == ["other.unlock"])
            // Not the first app's answer (404 there) in place of the one meant.
            let unnamed = try await client.send(.get, "/v1/customers/bob?environment=Sandbox", key: T.adminKey)
            #expect(unnamed.status == 400 && unnamed.errorCode == "bundle-id-required", "\(unnamed.json)")
            #expect(
                (unnamed.json["error"] as? [String: Any])?["message"] as? String
                    == "this key is not limited to one app, and reads one app's customers at a time: give bundleId, one of com.example.storekeeper, com.example.other"
            )
            let unknown = try await client.send(.get, "/v1/customers/bob?environment=Sandbox&bundleId=com.evil%0A", key: T.adminKey)
            #expect(unknown.status == 400 && unknown.errorCode == "unknown-app", "\(unknown.json)")
            #expect((unknown.json["error"] as? [String: Any])?["message"] as? String == #"no app 'com.evil\n' is configured on this server"#)
            // An app key reads its own app whatever bundleId says.
            #expect(
                try await Self.view(client, "bob", key: T.otherAppKey, query: "environment=Sandbox&bundleId=com.example.storekeeper").status == 200)
        }
    }

    @Test("no existence oracle: a customer known only to another app, or only in the other environment, is 404")
    func noExistenceOracle() async throws {
        var testbed = try T(catalog: T.twoApps)
        try testbed.engine.createCustomer(id: "bob")
        let token = LowercaseUUID(UUID())
        let bobsUnlock = try testbed.engine.purchase(.init(customerId: "bob", productId: "other.unlock", appAccountToken: token))
        var configuration = testbed.configuration
        configuration.apps[0].environments = [.sandbox, .production]
        try await testbed.withClient(configuration: configuration) { client in
            #expect(
                try await client.send(
                    .post, "/v1/customers/bob/transactions", body: Self.transaction(bobsUnlock.signedTransaction), key: T.otherAppKey
                ).status == 200)
            #expect(try await Self.view(client, "bob", key: T.otherAppKey).status == 200)
            // Bob owns a token, in app B's sandbox only.
            for query in ["environment=Sandbox", "environment=Production"] {
                let answer = try await client.send(.get, "/v1/customers/bob?\(query)", key: T.appKey)
                #expect(answer.status == 404 && answer.errorCode == "unknown-customer", "\(query): \(answer.json)")
            }
            #expect(try await Self.view(client, "nobody", key: T.appKey).status == 404)
        }
    }

    @Test("an admin key's submission is checked by the app it names, and that check's error is reported")
    func adminSubmissionErrors() async throws {
        let (testbed, purchase) = try CustomerAPITests.aliceSubscribed()
        var info = try UnverifiedJWS.unsafeDecodePayload(purchase.signedTransaction, as: TransactionInfo.self)
        info.environment = nil
        let withoutEnvironment = try testbed.signer.sign(info)
        info.environment = .sandbox
        info.bundleId = "com.example.unknown"
        let unknownApp = try testbed.signer.sign(info)
        let signed = purchase.signedTransaction
        try await testbed.withClient { client in
            let missing = try await client.send(
                .post, "/v1/customers/alice/transactions", body: Self.transaction(withoutEnvironment), key: T.adminKey)
            #expect(missing.status == 403 && missing.errorCode == "environment-mismatch", "\(missing.json)")
            #expect(((missing.json["error"] as? [String: Any])?["message"] as? String)?.contains("environment is missing") == true)
            let unknown = try await client.send(.post, "/v1/customers/alice/transactions", body: Self.transaction(unknownApp), key: T.adminKey)
            #expect(unknown.status == 403 && unknown.errorCode == "unknown-app", "\(unknown.json)")
            let fine = try await client.send(.post, "/v1/customers/alice/transactions", body: Self.transaction(signed), key: T.adminKey)
            #expect(fine.status == 200, "\(fine.json)")
        }
    }
}
