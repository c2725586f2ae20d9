import AppStoreModels
import AppStoreSimulator
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

/// The ledger checked against the App Store and repaired.
@Suite("Storekeeper server: reconciliation")
struct ReconciliationTests {
    typealias T = RecoveryTestbed

    @Test(
        "a notification dropped by the simulator shows as drift in a dry run (which changes nothing); reconciling then equals the ground truth, and a second run finds no drift"
    )
    func droppedNotification() async throws {
        let testbed = try await T(environment: .sandbox)
        try await testbed.withSimulator { simulatorURL in
            // Recovery off: reconciliation alone must find what was lost.
            var configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            // A second app, without App Store Server API credentials.
            configuration.apps.append(
                .init(bundleId: "com.example.other", appAppleId: 1, environments: [.sandbox], trustedRoots: configuration.apps[0].trustedRoots))
            try await testbed.withServer(configuration) { base in
                let bob = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                    try engine.createCustomer(id: "bob")
                    return try engine.purchase(.init(customerId: "bob", productId: "unlock.lifetime"))
                }
                #expect(try await T.submit(bob.signedTransaction, for: "bob", to: base) == 200)
                await testbed.deliverer.deliverDue()
                // An hour later (the App Store signs each answer at its own time), bob is refunded.
                try await testbed.advance(by: 3_600)
                try await testbed.act { (engine) throws(SimulatorError) in
                    var faults = engine.state.faults
                    faults.dropNextNotifications = 1
                    engine.setFaults(faults)
                    try engine.refund(transactionId: bob.transactionId)
                }
                let all = await testbed.simulator.state.notifications
                #expect(
                    all.last?.sendAttempts.map(\.sendAttemptResult) == ["TIMED_OUT"],
                    "\(all.map { ($0.notificationType.rawValue, $0.sendAttempts.map(\.sendAttemptResult)) })")
                #expect(try await testbed.mismatches(at: base).count == 1, "bob still has what was refunded")

                let reconcile = base + "/v1/admin/customers/bob/reconcile"
                #expect(try await T.call(.POST, reconcile + "?dryRun=true", key: T.appKey).status == 403)
                let dry = try await T.call(.POST, reconcile + "?dryRun=true", key: T.adminKey)
                #expect(dry.status == 200, "\(dry.json)")
                let drift = (dry.json["drift"] as? [[String: Any]]) ?? []
                #expect(drift.contains { $0["kind"] as? String == "revoked" && $0["transactionId"] as? String == bob.transactionId }, "\(dry.json)")
                #expect(dry.json["recordsChanged"] as? Int == 0)
                #expect(try await testbed.mismatches(at: base).count == 1, "a dry run changes nothing")

                // A mistyped parameter or value is refused, never run as a real reconcile (`dryrun` is not `dryRun`).
                for (query, code, named) in [
                    ("?dryrun=true", "unknown-parameter", #"unknown query parameter 'dryrun': did you mean "dryRun"?"#),
                    ("?dryRun=banana", "invalid-parameter", "dryRun must be true or false, not 'banana'"),
                    ("?dryRun=1", "invalid-parameter", "dryRun must be true or false, not '1'"),
                    ("?dryRun=true&dryRun=false", "repeated-parameter", "dryRun"),
                    ("?environment=sandbox", "invalid-parameter", "environment must be Production, Sandbox or Xcode, not 'sandbox'"),
                    ("?environment=Production", "unknown-app", "no app with credentials matches"),
                    ("?bundleId=com.nope", "unknown-app", "no app with credentials matches"),
                    // A bad value is named before the app is looked for.
                    ("?dryRun=maybe&bundleId=com.nope", "invalid-parameter", "dryRun must be true or false, not 'maybe'"),
                ] {
                    let refused = try await T.call(.POST, reconcile + query, key: T.adminKey)
                    let error = refused.json["error"] as? [String: Any]
                    #expect(refused.status == 400 && error?["code"] as? String == code, "\(query): \(refused.json)")
                    #expect((error?["message"] as? String)?.contains(named) == true, "\(query): \(refused.json)")
                }
                #expect(try await testbed.mismatches(at: base).count == 1, "no refused request changed anything")
                // An app without credentials is named as such.
                let noCredentials = try await T.call(.POST, reconcile + "?bundleId=com.example.other", key: T.adminKey)
                #expect(
                    noCredentials.status == 404 && (noCredentials.json["error"] as? [String: Any])?["code"] as? String == "no-credentials",
                    "\(noCredentials.json)")
                // A customer the app has no data for is 404, not an empty report.
                let unknown = try await T.call(.POST, base + "/v1/admin/customers/nobody-here/reconcile", key: T.adminKey)
                #expect(
                    unknown.status == 404 && (unknown.json["error"] as? [String: Any])?["code"] as? String == "unknown-customer", "\(unknown.json)")
                // The app API's read is as strict.
                let read = try await T.call(.GET, base + "/v1/customers/bob?enviroment=Sandbox", key: T.appKey)
                #expect(
                    read.status == 400
                        && ((read.json["error"] as? [String: Any])?["message"] as? String)?.contains(#"did you mean "environment"?"#) == true,
                    "\(read.json)")

                let repaired = try await T.call(.POST, reconcile, key: T.adminKey)
                #expect(repaired.status == 200 && (repaired.json["recordsChanged"] as? Int ?? 0) > 0, "\(repaired.json)")
                #expect(try await testbed.mismatches(at: base).isEmpty)
                let again = try await T.call(.POST, reconcile, key: T.adminKey)
                #expect((again.json["drift"] as? [Any])?.isEmpty == true, "\(again.json)")
            }
        }
    }
}
