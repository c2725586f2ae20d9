package import AppStoreModels
package import AppStoreReceipts
package import AppStoreSigning
package import Crypto
package import Foundation

/// The App Store the tests and benchmarks talk to: one test certificate authority (its signer signs what the
/// simulator issues, and a verifier that trusts its root checks it), the app it sells, and an API key the simulator
/// accepts.
package enum TestAppStore {
    /// When the tests' App Store clock starts: 2026-05-28.
    package static let start = Date(timeIntervalSince1970: 1_780_000_000)
    package static let bundleID = "com.example.storekeeper"
    package static let appAppleID: Int64 = 6_450_000_001

    /// Valid from 2020 to 2040, so that a test's clock may move years either way.
    package static let authority: TestCertificateAuthority = {
        var options = TestCertificateAuthority.Options()
        options.names = .storekeeper("Storekeeper Test App Store")
        options.validity = Date(timeIntervalSince1970: 1_577_836_800)...Date(timeIntervalSince1970: 2_208_988_800)
        return try! TestCertificateAuthority.generate(options: options)
    }()

    /// The leaf that signs JWS and receipts.
    static let leaf = try! authority.issueLeaf()
    package static let signer: JWSSigner = try! JWSSigner(privateKey: leaf.key, certificateChain: leaf.chain)
    package static let receiptSigner: ReceiptSigner = try! ReceiptSigner(privateKey: leaf.key, certificateChain: leaf.chain)

    /// A verifier for the test app in `environment` that trusts the test authority's root (and nothing else).
    package static func verifier(environment: AppStoreEnvironment = .sandbox, bundleID: String = bundleID) -> SignedDataVerifier {
        SignedDataVerifier(
            configuration: try! .init(
                bundleID: bundleID, appAppleID: appAppleID, environment: environment, trustedRoots: [authority.rootCertificate]
            ))
    }

    /// A lifecycle engine on the sample catalog, signing with the test authority.
    package static func engine(
        environment: AppStoreEnvironment = .sandbox, rate: RenewalRate = .realTime, now: Date = start
    ) throws -> LifecycleEngine {
        var engine = try LifecycleEngine(
            catalog: .sample, state: SimulatorState(environment: environment, renewalRate: rate, now: now), signer: signer
        )
        engine.receiptSigner = receiptSigner
        return engine
    }

    // MARK: - The App Store Server API key

    /// The key ID and issuer the simulator expects.
    package static let apiKeyInfo = SimulatorDirectory.APIKeyInfo(keyId: "TESTKEY123", issuerId: "9a1c3f5e-0000-4000-8000-000000000001")
    package static let apiPrivateKey = P256.Signing.PrivateKey()

    /// The API key for `bundleID`, as the App Store Server API client holds it.
    package static func apiKey(bundleID: String = bundleID) -> AppStoreAPIKey {
        AppStoreAPIKey(issuerID: apiKeyInfo.issuerId, keyID: apiKeyInfo.keyId, bundleID: bundleID, privateKey: apiPrivateKey)
    }

    /// A signed API token, as the client sends it.
    package static func apiToken(bundleID: String = bundleID, lifetime: TimeInterval = 300, issuedAt: Date = Date()) throws -> String {
        try APIAuthToken.make(key: apiKey(bundleID: bundleID), issuedAt: issuedAt, lifetime: lifetime)
    }

    /// A simulator around `engine` that accepts the test API key.
    package static func simulator(_ engine: LifecycleEngine) -> Simulator {
        Simulator(engine: engine, apiKey: apiKeyInfo, apiPublicKey: apiPrivateKey.publicKey)
    }
}
