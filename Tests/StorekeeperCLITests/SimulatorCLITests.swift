import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

/// Receives notifications for CLI tests.
actor NotificationSink {
    var bodies: [String] = []
    func add(_ body: String) { bodies.append(body) }

    func serve(_ body: @Sendable (String) async throws -> Void) async throws {
        let router = Router()
        router.post("/notifications") { request, _ -> HTTPResponse.Status in
            await self.add(String(buffer: try await request.body.collect(upTo: 1 << 20)))
            return .ok
        }
        try await Application(router: router).test(.live) { client in
            try await body("http://127.0.0.1:\(client.port!)/notifications")
        }
    }
}

@Suite("storekeeper simulator CLI")
struct SimulatorCLITests {
    @Test("init, then run a shipped scenario against a URL of our own: the notifications arrive and verify")
    func initAndRun() async throws {
        let dir = TestFiles.directory.appendingPathComponent("sim-cli-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let initialized = try await CLI.runDetached(["simulator", "init", dir])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        #expect(initialized.stdout.contains("key ID:"))
        #expect(try await CLI.runDetached(["simulator", "init", dir]).stderr.hasPrefix("error: conflict: "))
        // The server configuration it writes grants the sample catalog's season pass (non-renewing, P3M) for the
        // shortest three months, as the demo does; without it, buying one granted nothing.
        let written = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: URL(fileURLWithPath: dir + "/storekeeper.json")))
        guard case .object(let file) = written, case .object(let entitlements)? = file["entitlements"],
            case .object(let durations)? = entitlements["nonRenewingDurations"]
        else {
            Issue.record("no entitlements.nonRenewingDurations in storekeeper.json: \(written)")
            return
        }
        #expect(durations == ["season.pass": .integer(89 * 86_400)], "\(durations)")
        // At a sandbox renewal rate, the rate's length of the period (P3M at 5-minutes: 15 minutes), never longer.
        let fast = TestFiles.directory.appendingPathComponent("sim-cli-fast-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: fast) }
        #expect(try await CLI.runDetached(["simulator", "init", fast, "--renewal-rate", "5-minutes"]).status == 0)
        let fastFile = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: URL(fileURLWithPath: fast + "/storekeeper.json")))
        guard case .object(let fastFields) = fastFile, case .object(let fastEntitlements)? = fastFields["entitlements"] else {
            Issue.record("no entitlements in \(fastFile)")
            return
        }
        #expect(fastEntitlements["nonRenewingDurations"] == .object(["season.pass": .integer(900)]), "\(fastEntitlements)")

        let sink = NotificationSink()
        try await sink.serve { url in
            let run = try await CLI.runDetached(["simulator", "run", "--dir", dir, "--notify-url", url, "subscriber-lifecycle"])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("EXPIRED/VOLUNTARY"))
            #expect(run.stdout.contains("→ SUCCESS"))
        }
        let bodies = await sink.bodies
        #expect(bodies.count == 7)
        let root = try Certificate(pemEncoded: try String(contentsOfFile: dir + "/ca/root.pem", encoding: .utf8))
        let verifier = SignedDataVerifier(
            configuration: try .init(
                bundleID: "com.example.storekeeper", appAppleID: nil, environment: .sandbox, trustedRoots: [root]
            ))
        var types: [String] = []
        for body in bodies {
            let request = try JSONDecoder().decode(NotificationRequestBody.self, from: Data(body.utf8))
            let verified = try await verifier.verifyNotification(request.signedPayload)
            types.append(verified.payload.notificationType.rawValue)
        }
        #expect(types.first == "SUBSCRIBED" && types.last == "EXPIRED")

        let verify = try await CLI.runDetached([
            "verify", "--root", dir + "/ca/root.pem", "--environment", "Sandbox", "--bundle-id", "com.example.storekeeper",
            try JSONDecoder().decode(NotificationRequestBody.self, from: Data(bodies[0].utf8)).signedPayload,
        ])
        #expect(verify.status == 0, "\(verify.stderr)")

        let bad = try await CLI.runDetached(["simulator", "run", "--dir", dir, "no-such-scenario"])
        #expect(bad.status == 1 && bad.stderr.hasPrefix("error: unreadable-input: "))
        let both = try await CLI.runDetached(["simulator", "run", "--dir", dir, "--url", "http://127.0.0.1:1", "refunds"])
        #expect(both.status != 0)
    }

    @Test("api commands call a served simulator with APPSTORE_* credentials and print verified, decoded JSON")
    func apiCommands() async throws {
        let dir = TestFiles.directory.appendingPathComponent("sim-api-\(UUID())")
        defer { try? FileManager.default.removeItem(at: dir) }
        let directory = try SimulatorDirectory.initialize(at: dir)
        let simulator = try Simulator(directory: directory)
        _ = try await simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "alice")
            return try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        }
        let key = try directory.loadAPIKeyInfo()
        let app = Application(router: SimulatorApplication.buildRouter(simulator: simulator))
        try await app.test(.live) { client in
            let environment = [
                "APPSTORE_ISSUER_ID": key.issuerId, "APPSTORE_KEY_ID": key.keyId, "APPSTORE_BUNDLE_ID": "com.example.storekeeper",
                "APPSTORE_PRIVATE_KEY": directory.apiPrivateKeyFile(keyId: key.keyId).path,
                "APPSTORE_BASE_URL": "http://127.0.0.1:\(client.port!)", "APPSTORE_ENVIRONMENT": "Sandbox",
            ]
            let root = directory.rootCertificateFile.path
            let info = try await CLI.runDetached(["api", "transaction", "2000000000000001", "--root", root], environment: environment)
            #expect(info.status == 0, "\(info.stderr)")
            let signed = try #require(try CLI.json(info.stdout)["signedTransactionInfo"] as? [String: Any])
            #expect(signed["verified"] as? Bool == true)
            #expect((signed["payload"] as? [String: Any])?["productId"] as? String == "pro.monthly")
            let statuses = try await CLI.runDetached(
                ["api", "statuses", "2000000000000001", "--root", root, "--status", "1"], environment: environment)
            #expect(statuses.status == 0 && statuses.stdout.contains("\"autoRenewStatus\" : 1"), "\(statuses.stderr)")
            let history = try await CLI.runDetached(["api", "history", "2000000000000001", "--raw"], environment: environment)
            #expect(history.status == 0 && history.stdout.contains("signedTransactions"))
            let missing = try await CLI.runDetached(["api", "transaction", "42", "--no-retry"], environment: environment)
            #expect(missing.status == 1 && missing.stderr.hasPrefix("error: api-4040010: HTTP 404"), "\(missing.stderr)")
            let invalid = try await CLI.runDetached(
                ["api", "extend", "2000000000000001", "--days", "120", "--reason", "1"], environment: environment)
            #expect(invalid.status == 64 && invalid.stderr.hasPrefix("error: invalid-request: extendByDays is 120"), "\(invalid.stderr)")
            let extended = try await CLI.runDetached(["api", "extend", "2000000000000001", "--days", "3", "--reason", "3"], environment: environment)
            #expect(extended.status == 0 && extended.stdout.contains("\"success\" : true"), "\(extended.stderr)")
            var noKey = environment
            noKey["APPSTORE_KEY_ID"] = ""
            let unconfigured = try await CLI.runDetached(["api", "transaction", "1"], environment: noKey)
            #expect(unconfigured.stderr.hasPrefix("error: missing-credential: give --key-id or set APPSTORE_KEY_ID"))
            for output in [info, statuses, history, missing, invalid, extended] {
                #expect(!output.stderr.contains("BEGIN PRIVATE KEY") && !output.stdout.contains("Bearer"))
            }
        }
    }

    @Test("scenarios lists every shipped scenario")
    func scenarios() async throws {
        let output = try await CLI.runDetached(["simulator", "scenarios"])
        #expect(output.status == 0)
        for name in ["subscriber-lifecycle", "billing-retry", "refunds", "family-sharing", "price-increase"] {
            #expect(output.stdout.contains(name))
        }
    }
}
