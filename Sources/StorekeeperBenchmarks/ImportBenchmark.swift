package import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Logging
import StorekeeperCore
import StorekeeperSQLite

/// `storekeeper bench import`: `storekeeper import`'s run (``CustomerImport``) of customers given by original
/// transaction ID, into an empty ledger, against a simulator that enforces Apple's rate limits, over loopback: how
/// close to the allowed rate the import keeps, and whether any call was refused with 429.
package enum ImportBenchmark {
    package struct Result: Codable, Sendable {
        package var benchmark = "import"
        package var environment: String
        package var customers: Int
        package var imported: Int
        package var requests: Int
        package var seconds: Double
        package var customersPerSecond: Double
        package var requestsPerSecond: Double
        /// Apple's limit for these endpoints (Get All Subscription Statuses and Get Transaction History share one).
        package var allowedPerSecond: Double
        /// ``requestsPerSecond`` ÷ ``allowedPerSecond``.
        package var shareOfAllowed: Double
        /// Calls the simulator refused with 429 (the client does not retry in this run: any stops it).
        package var rateLimited: Int
    }

    package static func run(customers: Int, environment: AppStoreEnvironment, concurrency: Int) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("storekeeper-import-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), environment: environment)
        let simulator = try Simulator(directory: simulatorDirectory)
        let lines = try await simulator.perform { (engine) throws(SimulatorError) in
            var faults = engine.state.faults
            faults.rateLimitsEnabled = true
            engine.setFaults(faults)
            return try (0..<customers).map { (index) throws(SimulatorError) -> CustomerImport.Line in
                try engine.createCustomer(id: "c\(index)")
                let purchase = try engine.purchase(.init(customerId: "c\(index)", productId: index % 3 == 0 ? "unlock.lifetime" : "pro.monthly"))
                return CustomerImport.Line(number: index + 1, customerId: "c\(index)", source: .transactionId(purchase.originalTransactionId))
            }
        }
        let authority = try simulatorDirectory.loadAuthority()
        let app = VerifierKey(bundleId: "com.example.storekeeper", environment: environment)
        let verifier = SignedDataVerifier(
            configuration: try .init(
                bundleID: app.bundleId, appAppleID: 6_450_000_001, environment: environment, trustedRoots: [authority.rootCertificate]
            ))
        let store = try SQLiteLedgerStore(path: directory.appendingPathComponent("ledger.sqlite").path)
        let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
        return try await RateLimitedSimulator.serve(simulator, directory: simulatorDirectory, app: app) { client in
            let importer = AccountImporter(app: app, client: client, verifier: verifier, store: store, logger: logger)
            let run = CustomerImport.Run(total: lines.count)
            let started = ContinuousClock.now
            var rateLimited = 0
            do {
                try await run.run(
                    lines, concurrency: concurrency,
                    resolve: { line in
                        guard case .transactionId(let id) = line.source else {
                            return .failure(.init(line: line.number, customerId: line.customerId, outcome: .failed))
                        }
                        return .success((importer, id))
                    }, done: { _ in })
            } catch let error as CustomerImport.Stopped {
                rateLimited = error.reason.contains("429") ? 1 : 0
                if rateLimited == 0 { throw error }
            }
            let seconds = (ContinuousClock.now - started) / .seconds(1)
            let progress = run.progress
            let allowed = APIRateLimitFamily.general.rate(sandbox: environment != .production)
            let rate = Double(progress.requests) / max(seconds, 0.001)
            return Result(
                environment: environment.rawValue, customers: customers, imported: progress.counts["imported"] ?? 0, requests: progress.requests,
                seconds: (seconds * 100).rounded() / 100, customersPerSecond: (Double(progress.done) / max(seconds, 0.001) * 10).rounded() / 10,
                requestsPerSecond: (rate * 10).rounded() / 10, allowedPerSecond: allowed, shareOfAllowed: (rate / allowed * 1000).rounded() / 1000,
                rateLimited: rateLimited)
        }
    }
}
