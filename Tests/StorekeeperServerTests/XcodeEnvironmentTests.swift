import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: an app in the Xcode environment (StoreKit testing)")
struct XcodeEnvironmentTests {
    typealias T = ServerTestbed
    static let bundle = "com.example.naturelab.backyardbirds.example"

    /// Apple's Xcode-signed transaction, and the certificate in its `x5c` (what Xcode exports) written to a file.
    static func fixture(in directory: URL) throws -> (jws: String, certificate: String) {
        let jws = try String(contentsOf: SharedCorpus.appleReceipts.appendingPathComponent("xcode-signed-transaction"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let header = try #require(jws.split(separator: ".").first)
        var base64 = header.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        let json = try JSONSerialization.jsonObject(with: try #require(Data(base64Encoded: base64))) as? [String: Any]
        let first = try #require((json?["x5c"] as? [String])?.first)
        let file = directory.appendingPathComponent("StoreKitTestCertificate.cer")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try #require(Data(base64Encoded: first)).write(to: file)
        return (jws, file.path)
    }

    @Test(
        "an app configured for Xcode with its exported certificate takes Xcode-signed purchases and serves them in the Xcode environment; configured for Sandbox, the same app refuses them"
    )
    func xcodePurchases() async throws {
        let testbed = try T()
        let (jws, certificate) = try Self.fixture(in: testbed.directory)
        var configuration = testbed.configuration
        configuration.apps.append(.init(bundleId: Self.bundle, appAppleId: nil, environments: [.xcode], xcodeCertificate: certificate))
        configuration.apiKeys.append(
            .init(name: "birds", sha256: ServerConfiguration.hash(apiKey: "birds-key-0123456789abcdef"), scope: .app, bundleId: Self.bundle))
        try configuration.validate()
        try await testbed.withClient(configuration: configuration) { client in
            let body = #"{"signedTransaction":"\#(jws)"}"#
            let submitted = try await client.send(.post, "/v1/customers/kim/transactions", body: body, key: "birds-key-0123456789abcdef")
            #expect(submitted.status == 200, "\(submitted.json)")
            let read = try await client.send(.get, "/v1/customers/kim", key: "birds-key-0123456789abcdef")
            #expect(read.status == 200 && read.json["environment"] as? String == "Xcode", "the Xcode environment is the app's default: \(read.json)")
            let subscriptions = (read.json["subscriptions"] as? [[String: Any]]) ?? []
            #expect(subscriptions.first?["productId"] as? String == "pass.premium", "\(read.json)")
            #expect(try await client.send(.get, "/v1/customers/kim?environment=Xcode", key: "birds-key-0123456789abcdef").status == 200)
            #expect(
                try await client.send(.get, "/v1/customers/kim?environment=Sandbox", key: "birds-key-0123456789abcdef").errorCode
                    == "unknown-environment")
            // Another app's key: refused, naming the mismatch.
            let refused = try await client.send(.post, "/v1/customers/kim/transactions", body: body, key: T.appKey)
            #expect(refused.status == 403 && refused.errorCode == "bundle-id-mismatch", "\(refused.json)")
        }
        // The same app configured for Sandbox only (Apple's root): Xcode's data is never an App Store purchase.
        var sandbox = testbed.configuration
        sandbox.apps.append(.init(bundleId: Self.bundle, appAppleId: nil, environments: [.sandbox]))
        sandbox.apiKeys.append(
            .init(name: "birds", sha256: ServerConfiguration.hash(apiKey: "birds-key-0123456789abcdef"), scope: .app, bundleId: Self.bundle))
        try await testbed.withClient(configuration: sandbox) { client in
            let refused = try await client.send(
                .post, "/v1/customers/kim/transactions", body: #"{"signedTransaction":"\#(jws)"}"#, key: "birds-key-0123456789abcdef")
            #expect(refused.status == 400 && refused.errorCode == "wrong-certificate-count", "\(refused.json)")
        }
    }
}
