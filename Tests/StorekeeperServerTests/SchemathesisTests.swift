import AppStoreModels
import AppStoreSimulator
import Foundation
import NIOHTTP1
import StorekeeperServer
import StorekeeperTesting
import Testing

/// The running server against its own `/openapi.json`, exercised by schemathesis (PyPI): generated requests on every
/// operation, valid and invalid, with each key scope and none; every answer must be documented (status, content type,
/// headers, body schema) and none may be a 5xx.
@Suite("OpenAPI: schemathesis against the running server, for every key scope")
struct SchemathesisTests {
    typealias T = RecoveryTestbed

    static let available = ExternalTool.succeeds(["schemathesis", "--version"])

    /// Runs schemathesis on the document the server serves, with `key` (none: no Authorization header); its output.
    static func run(base: String, key: String?, scope: String) async throws -> (output: String, passed: Bool) {
        let report = TestFiles.directory.appendingPathComponent("schemathesis-\(scope)-\(UUID())")
        let configuration = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Schemathesis/schemathesis.toml")
        var arguments = [
            "schemathesis", "--config-file", configuration.path, "run", base + "/openapi.json", "--url", base,
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance",
            "--max-examples", "10", "--workers", "1", "--seed", "20261126", "--no-color", "--request-timeout", "30",
            "--report-dir", report.path, "--generation-database", "none", "--exclude-path", "/metrics", "--exclude-path", "/appstore/notifications",
            // Erasing customers at random would empty the ledger the other operations are tried on.
            "--exclude-operation-id", "eraseCustomer",
        ]
        if let key { arguments += ["--header", "Authorization: Bearer \(key)"] }
        let (text, passed) = try await ExternalTool.run(arguments, environment: ["NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"])
        // The keys are this run's, random; the output is kept short.
        return (String(text.replacingOccurrences(of: key ?? "\u{0}", with: "<key>").suffix(6_000)), passed)
    }

    @Test(
        "every answer to generated requests is documented and none is a 5xx, with an app key, a support key, an admin key and no key",
        .enabled(if: available, "schemathesis is not installed (pip install schemathesis; .ci/run does)"))
    func conforms() async throws {
        try await T.serving(.sandbox) { testbed, base in
            // Data for the operations to find: customers with purchases, a refund request, a consent.
            let ann = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-ann")
                try engine.createCustomer(id: "apple-bo")
                _ = try engine.purchase(.init(customerId: "apple-bo", productId: "coins.100"))
                return try engine.purchase(.init(customerId: "apple-ann", productId: "pro.monthly"))
            }
            #expect(try await T.submit(ann.signedTransaction, for: "alice", to: base) == 200)
            _ = try await T.call(.PUT, base + "/v1/customers/alice/consumption-consent", key: T.appKey, body: #"{"consented": true}"#)
            try await testbed.act { (engine) throws(SimulatorError) in try engine.requestRefund(transactionId: ann.transactionId, reason: .other) }
            for (scope, key) in [("app", T.appKey), ("support", T.supportKey), ("admin", T.adminKey), ("none", nil)] as [(String, String?)] {
                let run = try await Self.run(base: base, key: key, scope: scope)
                #expect(run.passed, "schemathesis with the \(scope) key:\n\(run.output)")
            }
        }
    }
}
