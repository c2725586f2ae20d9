import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import StorekeeperTesting
import Synchronization

/// A simulator served on a loopback port the OS picks, and API clients for it.
struct LiveSimulator {
    let simulator: Simulator
    let environment: AppStoreEnvironment

    init(environment: AppStoreEnvironment = .sandbox, setUp: (inout LifecycleEngine) throws -> Void = { _ in }) throws {
        var engine = try TestAppStore.engine(environment: environment)
        try setUp(&engine)
        simulator = TestAppStore.simulator(engine)
        self.environment = environment
    }

    /// A verifier that trusts the simulator's CA.
    var verifier: SignedDataVerifier { TestAppStore.verifier(environment: environment) }

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
        var configuration = AppStoreServerAPIClient.Configuration(
            key: TestAppStore.apiKey(), endpoint: .custom(baseURL: baseURL, environment: environment))
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
