import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import HummingbirdTesting
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
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sim-cli-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let initialized = try CLI.run(["simulator", "init", dir])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        #expect(initialized.stdout.contains("key ID:"))
        #expect(try CLI.run(["simulator", "init", dir]).stderr.hasPrefix("error: conflict: "))

        let sink = NotificationSink()
        try await sink.serve { url in
            let run = try CLI.run(["simulator", "run", "--dir", dir, "--notify-url", url, "subscriber-lifecycle"])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("EXPIRED/VOLUNTARY"))
            #expect(run.stdout.contains("→ SUCCESS"))
        }
        let bodies = await sink.bodies
        #expect(bodies.count == 7)
        let root = try Certificate(pemEncoded: try String(contentsOfFile: dir + "/ca/root.pem", encoding: .utf8))
        let verifier = SignedDataVerifier(configuration: try .init(
            bundleID: "com.example.storekeeper", appAppleID: nil, environment: .sandbox, trustedRoots: [root]
        ))
        var types: [String] = []
        for body in bodies {
            let request = try JSONDecoder().decode(NotificationRequestBody.self, from: Data(body.utf8))
            let verified = try await verifier.verifyNotification(request.signedPayload)
            types.append(verified.payload.notificationType.rawValue)
        }
        #expect(types.first == "SUBSCRIBED" && types.last == "EXPIRED")

        let verify = try CLI.run(["verify", "--root", dir + "/ca/root.pem", "--environment", "Sandbox", "--bundle-id", "com.example.storekeeper",
                                  try JSONDecoder().decode(NotificationRequestBody.self, from: Data(bodies[0].utf8)).signedPayload])
        #expect(verify.status == 0, "\(verify.stderr)")

        let bad = try CLI.run(["simulator", "run", "--dir", dir, "no-such-scenario"])
        #expect(bad.status == 1 && bad.stderr.hasPrefix("error: unreadable-input: "))
        let both = try CLI.run(["simulator", "run", "--dir", dir, "--url", "http://127.0.0.1:1", "refunds"])
        #expect(both.status != 0)
    }

    @Test("scenarios lists every shipped scenario")
    func scenarios() throws {
        let output = try CLI.run(["simulator", "scenarios"])
        #expect(output.status == 0)
        for name in ["subscriber-lifecycle", "billing-retry", "refunds", "family-sharing", "price-increase"] {
            #expect(output.stdout.contains(name))
        }
    }
}
