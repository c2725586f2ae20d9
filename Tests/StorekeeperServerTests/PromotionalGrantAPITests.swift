import AppStoreModels
import AppStoreSimulator
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: promotional entitlements through the support API")
struct PromotionalGrantAPITests {
    typealias T = ServerTestbed
    static let app = "bundleId=com.example.storekeeper"

    /// alice, known by the token the server issued her, subscribed to pro.monthly: the notifications to deliver.
    static func aliceSubscribed(_ testbed: inout T) async throws -> [String] {
        let token = try await testbed.store.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        try testbed.engine.createCustomer(id: "apple-1")
        _ = try testbed.engine.purchase(.init(customerId: "apple-1", productId: "pro.monthly", appAccountToken: token))
        return testbed.engine.state.notifications.map(\.signedPayload)
    }

    static func deliver(_ notifications: [String], _ client: any TestClientProtocol) async throws {
        for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
    }

    @Test(
        "a support key grants and revokes: the entitlement shows in the app's read as promotional, the events and the support page say so, the audit log keeps who and why"
    )
    func grantAndRevoke() async throws {
        var testbed = try T(catalog: T.twoApps)
        let start = testbed.engine.state.now
        let clock = TestClock(start)
        let notifications = try await Self.aliceSubscribed(&testbed)
        try await testbed.withClient(now: { clock.now }) { client in
            try await Self.deliver(notifications, client)
            let granted = try await client.send(
                .post, "/v1/support/customers/alice/promotional-entitlements?\(Self.app)",
                body: #"{"entitlement": "pro", "days": 30, "reason": "the outage of 20 November"}"#, key: T.supportKey)
            #expect(granted.status == 201, "\(granted.json)")
            let grant = try #require(granted.json["grant"] as? [String: Any])
            let id = try #require(grant["id"] as? String)
            #expect(grant["entitlement"] as? String == "pro" && grant["active"] as? Bool == true && grant["grantedBy"] as? String == "support")
            #expect((grant["expiresDate"] as? Int).map(Int64.init) == start.addingTimeInterval(30 * 86_400).epochMilliseconds)
            let action = try #require(granted.json["action"] as? [String: Any])
            #expect(action["action"] as? String == "grant-promotional-entitlement" && action["keyName"] as? String == "support")
            #expect((action["id"] as? Int ?? 0) > 0 && action["target"] as? String == id)

            // The app's read: the grant beside the purchase, never as one.
            let read = try await client.send(.get, "/v1/customers/alice", key: T.appKey)
            let entitlements = try #require(read.json["entitlements"] as? [[String: Any]])
            let promotional = try #require(entitlements.first { $0["grantId"] as? String == id })
            #expect(promotional["source"] as? String == "promotional" && promotional["entitlement"] as? String == "pro")
            #expect(promotional["productId"] == nil && promotional["transactionId"] == nil && promotional["ownership"] == nil)
            #expect(entitlements.contains { $0["productId"] as? String == "pro.monthly" })

            // The support page: the grant, the event, the audit record.
            let page = try await client.send(.get, "/v1/support/customers/alice?\(Self.app)", key: T.supportKey)
            let grants = try #require(page.json["promotionalGrants"] as? [[String: Any]])
            #expect(grants.map { $0["id"] as? String } == [id] && grants.first?["reason"] as? String == "the outage of 20 November")
            let events = try #require(page.json["events"] as? [[String: Any]])
            #expect(events.last?["type"] as? String == "promotional.granted", "\(events)")
            #expect(((page.json["actions"] as? [[String: Any]]) ?? []).map { $0["action"] as? String } == ["grant-promotional-entitlement"])
            let listed = try await client.send(.get, "/v1/support/customers/alice/promotional-entitlements?\(Self.app)", key: T.supportKey)
            #expect((listed.json["grants"] as? [[String: Any]])?.count == 1, "\(listed.json)")

            // Revoked an hour later, with a reason; a second revocation is a 409 naming when and by whom.
            clock.set(start.addingTimeInterval(3_600))
            let path = "/v1/support/customers/alice/promotional-entitlements/\(id.uppercased())/revoke?\(Self.app)"
            let revoked = try await client.send(.post, path, body: #"{"reason": "granted twice"}"#, key: T.supportKey)
            #expect(revoked.status == 200, "\(revoked.json)")
            #expect((revoked.json["grant"] as? [String: Any])?["active"] as? Bool == false)
            #expect((revoked.json["grant"] as? [String: Any])?["revokedBy"] as? String == "support")
            let again = try await client.send(.post, path, body: #"{"reason": "again"}"#, key: T.supportKey)
            #expect(again.status == 409 && again.errorCode == "grant-revoked" && again.errorMessage.contains("'support'"), "\(again.json)")
            let after = try await client.send(.get, "/v1/customers/alice", key: T.appKey)
            #expect(((after.json["entitlements"] as? [[String: Any]]) ?? []).allSatisfy { $0["grantId"] == nil })
            let polled = try await client.send(.get, "/v1/events?customer=alice", key: T.appKey)
            let types = ((polled.json["events"] as? [[String: Any]]) ?? []).compactMap { $0["type"] as? String }
            #expect(types.suffix(2) == ["promotional.granted", "promotional.revoked"], "\(types)")
        }
    }

    @Test(
        "bad grants are refused with what was wrong; unknown customers and grants are 404s; an app key and another app's support key cannot grant or revoke"
    )
    func refusals() async throws {
        var testbed = try T(catalog: T.twoApps)
        let notifications = try await Self.aliceSubscribed(&testbed)
        try await testbed.withClient { client in
            try await Self.deliver(notifications, client)
            let grants = "/v1/support/customers/alice/promotional-entitlements?\(Self.app)"
            for (body, code, words) in [
                (
                    #"{"entitlement": "gold", "days": 30, "reason": "x"}"#, "invalid-parameter",
                    "not a name entitlements.productEntitlements gives (pro)"
                ),
                (#"{"entitlement": "pro", "days": 0, "reason": "x"}"#, "invalid-parameter", "days must be 1-3650"),
                (#"{"entitlement": "pro", "days": 4000, "reason": "x"}"#, "invalid-parameter", "days must be 1-3650"),
                (#"{"entitlement": "pro", "reason": "x"}"#, "invalid-parameter", "give days"),
                (#"{"entitlement": "pro", "days": 3, "expiresDate": 1, "reason": "x"}"#, "invalid-parameter", "not both"),
                (#"{"entitlement": "pro", "expiresDate": 1, "reason": "x"}"#, "invalid-parameter", "after now"),
                (#"{"entitlement": "pro", "days": 3, "reason": "  "}"#, "invalid-parameter", "reason is empty"),
                (#"{"entitlement": "<b>pro</b>", "days": 3, "reason": "x"}"#, "invalid-parameter", "is not an entitlement name"),
                (#"{"entitlement": "pro", "days": 3, "reason": "x", "extra": 1}"#, "malformed-body", "extra"),
                (#"{"entitlement": "pro", "dayz": 3, "reason": "x"}"#, "malformed-body", "dayz"),
                ("", "malformed-body", "the body is empty"),
            ] {
                let answer = try await client.send(.post, grants, body: body, key: T.supportKey)
                #expect(answer.status == 400 && answer.errorCode == code && answer.errorMessage.contains(words), "\(body): \(answer.json)")
            }
            let nobody = try await client.send(
                .post, "/v1/support/customers/nobody/promotional-entitlements?\(Self.app)",
                body: #"{"entitlement": "pro", "days": 3, "reason": "x"}"#,
                key: T.supportKey)
            #expect(nobody.status == 404 && nobody.errorCode == "unknown-customer", "\(nobody.json)")
            for key in [T.appKey, T.otherAppKey] {
                let answer = try await client.send(.post, grants, body: #"{"entitlement": "pro", "days": 3, "reason": "x"}"#, key: key)
                #expect(answer.status == 403 && answer.errorCode == "wrong-scope", "\(answer.json)")
            }
            let other = try await client.send(.post, grants, body: #"{"entitlement": "pro", "days": 3, "reason": "x"}"#, key: T.otherSupportKey)
            #expect(other.status == 403 && other.errorCode == "other-app", "another app's key cannot write to this app: \(other.json)")
            let otherCustomer = try await client.send(
                .post, "/v1/support/customers/alice/promotional-entitlements", body: #"{"entitlement": "pro", "days": 3, "reason": "x"}"#,
                key: T.otherSupportKey)
            #expect(otherCustomer.status == 404 && otherCustomer.errorCode == "unknown-customer", "in its own app, alice is unknown")
            let unknownGrant = try await client.send(
                .post, "/v1/support/customers/alice/promotional-entitlements/\(UUID().uuidString)/revoke?\(Self.app)", body: #"{"reason": "x"}"#,
                key: T.supportKey)
            #expect(unknownGrant.status == 404 && unknownGrant.errorCode == "unknown-grant", "\(unknownGrant.json)")
            #expect(unknownGrant.errorMessage.contains("audit record"), "the probe is audited")
            let notUUID = try await client.send(
                .post, "/v1/support/customers/alice/promotional-entitlements/1%27%20OR%201=1/revoke?\(Self.app)", body: #"{"reason": "x"}"#,
                key: T.supportKey)
            #expect(notUUID.status == 400 && notUUID.errorMessage.contains("is not a grant ID"), "\(notUUID.json)")
            // Nothing was granted by any of them.
            let page = try await client.send(.get, "/v1/support/customers/alice?\(Self.app)", key: T.supportKey)
            #expect((page.json["promotionalGrants"] as? [[String: Any]])?.isEmpty == true)
            let actions = (page.json["actions"] as? [[String: Any]]) ?? []
            #expect(actions.map { $0["outcome"] as? String } == ["refused"], "only the revocation of an unknown grant reached the ledger: \(actions)")
        }
    }
}
