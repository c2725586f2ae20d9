package import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import Logging
import StorekeeperCore
import StorekeeperSQLite

/// `storekeeper bench reconcile`: `reconcile --all` against a simulator that enforces Apple's rate limits, over
/// loopback: how close to the allowed rate the job keeps, and whether any call was refused with 429.
package enum ReconcileBenchmark {
    package struct Result: Codable, Sendable {
        package var benchmark = "reconcile"
        package var environment: String
        package var subscriptions: Int
        package var accountsFetched: Int
        package var requests: Int
        package var seconds: Double
        package var requestsPerSecond: Double
        /// Apple's limit for these endpoints (Get All Subscription Statuses and Get Transaction History share one).
        package var allowedPerSecond: Double
        /// ``requestsPerSecond`` ÷ ``allowedPerSecond``.
        package var shareOfAllowed: Double
        /// Calls the simulator refused with 429 (the client does not retry in this run: any would fail it).
        package var rateLimited: Int
        package var drift: Int
    }

    package static func run(subscriptions: Int, environment: AppStoreEnvironment, concurrency: Int) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("storekeeper-reconcile-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), environment: environment)
        let simulator = try Simulator(directory: simulatorDirectory)
        let purchases = try await simulator.perform { (engine) throws(SimulatorError) in
            var faults = engine.state.faults
            faults.rateLimitsEnabled = true
            engine.setFaults(faults)
            return try (0..<subscriptions).map { (index) throws(SimulatorError) -> (String, String) in
                try engine.createCustomer(id: "c\(index)")
                return ("c\(index)", try engine.purchase(.init(customerId: "c\(index)", productId: "pro.monthly")).signedTransaction)
            }
        }
        let authority = try simulatorDirectory.loadAuthority()
        let app = VerifierKey(bundleId: "com.example.storekeeper", environment: environment)
        let verifier = SignedDataVerifier(
            configuration: try .init(
                bundleID: app.bundleId, appAppleID: 6_450_000_001, environment: environment, trustedRoots: [authority.rootCertificate]
            ))
        let store = try SQLiteLedgerStore(path: directory.appendingPathComponent("ledger.sqlite").path)
        for (customer, jws) in purchases { _ = try await store.submit(try await verifier.verifyTransaction(jws), customerId: customer) }

        let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
        return try await RateLimitedSimulator.serve(simulator, directory: simulatorDirectory, app: app) { client in
            let reconciler = Reconciler(app: app, client: client, verifier: verifier, store: store, logger: logger, concurrency: concurrency)
            let report: Reconciler.Report?
            do {
                report = try await reconciler.reconcile(.allSubscriptions, dryRun: false)
            } catch let error as AppStoreServerAPIError where error.httpStatus == 429 {
                report = nil
            }
            let allowed = APIRateLimitFamily.general.rate(sandbox: environment != .production)
            let requests = report?.requests ?? 0, seconds = report?.seconds ?? 0
            let rate = Double(requests) / max(seconds, 0.001)
            return Result(
                environment: environment.rawValue, subscriptions: subscriptions, accountsFetched: report?.accountsFetched ?? 0, requests: requests,
                seconds: (seconds * 100).rounded() / 100, requestsPerSecond: (rate * 10).rounded() / 10, allowedPerSecond: allowed,
                shareOfAllowed: (rate / allowed * 1000).rounded() / 1000, rateLimited: report == nil ? 1 : 0, drift: report?.drift.count ?? 0
            )
        }
    }
}

/// A simulator that enforces Apple's rate limits, served over loopback for one benchmark, and a client of its App
/// Store Server API paced as the server's jobs are (95 % of the limits), without retries (one 429 fails the run).
enum RateLimitedSimulator {
    static func serve<T: Sendable>(
        _ simulator: Simulator, directory simulatorDirectory: SimulatorDirectory, app: VerifierKey,
        _ body: @escaping @Sendable (AppStoreServerAPIClient) async throws -> T
    ) async throws -> T {
        let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
        let deliverer = NotificationDeliverer(simulator: simulator, logger: logger)
        let ports = AsyncStream<Int>.makeStream()
        let served = SimulatorApplication.build(simulator: simulator, deliverer: deliverer, port: 0, logger: logger) { ports.continuation.yield($0) }
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await served.runService(gracefulShutdownSignals: [])
                return nil
            }
            var iterator = ports.stream.makeAsyncIterator()
            guard let port = await iterator.next() else { throw VerifyBenchmark.BenchmarkError(message: "the simulator did not start") }
            let keyInfo = try simulatorDirectory.loadAPIKeyInfo()
            let key = try AppStoreAPIKey(
                issuerID: keyInfo.issuerId, keyID: keyInfo.keyId, bundleID: app.bundleId,
                privateKeyFile: simulatorDirectory.apiPrivateKeyFile(keyId: keyInfo.keyId).path
            )
            var configuration = AppStoreServerAPIClient.Configuration(
                key: key, endpoint: .custom(baseURL: "http://127.0.0.1:\(port)", environment: app.environment))
            configuration.rateLimiting = .appleShare(0.95)
            configuration.retry = RetryPolicy(maximumAttempts: 1)
            let result = try await body(AppStoreServerAPIClient(configuration: configuration, logger: logger))
            group.cancelAll()
            return result
        }!
    }
}
