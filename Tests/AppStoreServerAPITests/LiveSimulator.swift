import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Synchronization

/// A simulator served on a loopback port the OS picks, and API clients for it.
struct LiveSimulator {
    static let keyInfo = SimulatorDirectory.APIKeyInfo(keyId: "CLIENTKEY1", issuerId: "5f1c1b1e-0000-4000-8000-00000000c11e")
    static let privateKey = P256.Signing.PrivateKey()
    static let bundleID = "com.example.storekeeper"
    static let start = Date(timeIntervalSince1970: 1_780_000_000)
    static let authority: TestCertificateAuthority = {
        var options = TestCertificateAuthority.Options()
        options.validity = Date(timeIntervalSince1970: 1_577_836_800)...Date(timeIntervalSince1970: 2_208_988_800)
        return try! TestCertificateAuthority.generate(options: options)
    }()

    let simulator: Simulator
    let environment: AppStoreEnvironment

    init(environment: AppStoreEnvironment = .sandbox, setUp: (inout LifecycleEngine) throws -> Void = { _ in }) throws {
        var engine = try LifecycleEngine(
            catalog: .sample, state: SimulatorState(environment: environment, renewalRate: .realTime, now: Self.start),
            signer: try Self.authority.makeSigner()
        )
        try setUp(&engine)
        simulator = Simulator(engine: engine, apiKey: Self.keyInfo, apiPublicKey: Self.privateKey.publicKey)
        self.environment = environment
    }

    /// A verifier that trusts the simulator's CA.
    var verifier: SignedDataVerifier {
        SignedDataVerifier(configuration: try! .init(
            bundleID: Self.bundleID, appAppleID: 6_450_000_001, environment: environment, trustedRoots: [Self.authority.rootCertificate]
        ))
    }

    /// Serves the simulator and calls `body` with its base URL.
    func serve(_ body: @Sendable (String) async throws -> Void) async throws {
        let app = Application(router: SimulatorApplication.buildRouter(simulator: simulator))
        try await app.test(.live) { client in
            try await body("http://127.0.0.1:\(client.port!)")
        }
    }

    func client(
        _ baseURL: String,
        retry: RetryPolicy = RetryPolicy(initialBackoff: .milliseconds(20), maximumBackoff: .milliseconds(200), deadline: .seconds(20)),
        rateLimiting: AppStoreServerAPIClient.RateLimiting = .disabled,
        logger: Logger = Logger(label: "test")
    ) -> AppStoreServerAPIClient {
        let key = AppStoreAPIKey(issuerID: Self.keyInfo.issuerId, keyID: Self.keyInfo.keyId, bundleID: Self.bundleID, privateKey: Self.privateKey)
        var configuration = AppStoreServerAPIClient.Configuration(key: key, endpoint: .custom(baseURL: baseURL, environment: environment))
        configuration.retry = retry
        configuration.rateLimiting = rateLimiting
        return AppStoreServerAPIClient(configuration: configuration, logger: logger)
    }

    func setFaults(_ change: @Sendable (inout FaultConfiguration) -> Void) async throws {
        _ = try await simulator.perform { engine in
            var faults = engine.state.faults
            change(&faults)
            engine.setFaults(faults)
        }
    }
}

/// Collects every log record, to check that no secret is ever logged.
final class CollectingLogHandler: LogHandler, Sendable {
    let lines = Mutex<[String]>([])
    var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }
    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }

    func log(event: LogEvent) {
        lines.withLock { $0.append("\(event.level) \(event.message) \(event.metadata ?? [:])") }
    }

    var all: [String] { lines.withLock { $0 } }
}
