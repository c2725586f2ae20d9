import AppStoreModels
import AppStoreServerAPI
import ArgumentParser
import Foundation
import Logging
import StorekeeperCore
import StorekeeperServer

struct ReconcileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Compare the ledger with the App Store (statuses and transaction history) and repair it.",
        discussion: """
            Prints a JSON report per app and environment: every difference found, field by field (missing-transaction, \
            stale-transaction, revoked, stale-status, missing-renewal-info, stale-renewal-info), and how many records \
            changed. Older App Store data never overwrites newer ledger data. With --all, a progress line on standard \
            error. Calls are paced under Apple's rate limits.
            """
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Option(help: ArgumentHelp(stringLiteral: LedgerDatabase.help)) var database: String = "storekeeper.sqlite"
    @Option(help: "Every purchase of this customer.") var customer: String?
    @Option(help: "This purchase.") var originalTransactionId: String?
    @Flag(help: "Every subscription in the ledger.") var all = false
    @Option(help: "Only this app (default: every app with serverAPI credentials).") var bundleId: String?
    @Option(help: "Only this environment (Production or Sandbox).") var environment: String?
    @Flag(help: "Report the differences, change nothing.") var dryRun = false

    func validate() throws {
        guard [customer != nil, originalTransactionId != nil, all].filter({ $0 }).count == 1 else {
            throw ValidationError("give exactly one of --customer, --original-transaction-id, --all")
        }
        if let id = originalTransactionId, id.isEmpty || !id.allSatisfy(\.isASCII) || !id.allSatisfy(\.isNumber) {
            throw ValidationError("--original-transaction-id must be digits, not '\(id.prefix(64))'")
        }
    }

    func run() async throws {
        do {
            let configuration = try ServerConfiguration.load(path: config)
            let verifiers = try configuration.makeVerifiers()
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .warning
            let clients = try configuration.makeServerAPIClients(logger: logger).filter { app, _ in
                (bundleId == nil || app.bundleId == bundleId) && (environment == nil || app.environment.rawValue == environment)
            }
            guard !clients.isEmpty else {
                throw CLIError(code: "no-credentials", message: "no app in \(config) matching the options has serverAPI credentials")
            }
            let scope: Reconciler.Scope = customer.map { .customer($0) } ?? originalTransactionId.map { .originalTransactionId($0) } ?? .allSubscriptions
            let ledger = try await LedgerDatabase.open(database, logger: logger)
            let store = ledger.store
            for (app, client) in clients.sorted(by: { $0.key.description < $1.key.description }) {
                guard let verifier = verifiers[app] else { continue }
                let reconciler = Reconciler(app: app, client: client, verifier: verifier, store: store, logger: logger)
                let bar: ProgressLine? = all ? ProgressLine(label: "\(app)") : nil
                var progress: (@Sendable (Reconciler.Progress) -> Void)? = nil
                if let bar { progress = { bar.show($0) } }
                // One `reconcile --all` per app at a time on one database (each paces itself to Apple's whole limit).
                let lease = all ? JobLease(store: store, job: "reconcile all \(app.bundleId) \(app.environment.rawValue)", duration: configuration.jobLeaseDuration) : nil
                if let lease, try await !lease.acquire() {
                    throw CLIError(code: "job-running", message: "another `storekeeper reconcile --all` for \(app) is running on this database (it holds the job's lease)")
                }
                let report: Reconciler.Report
                if let lease {
                    let progress = progress
                    report = try await lease.whileHolding { try await reconciler.reconcile(scope, dryRun: dryRun, progress: progress) }
                    await lease.release()
                } else {
                    report = try await reconciler.reconcile(scope, dryRun: dryRun, progress: progress)
                }
                bar?.finish()
                try JSONOutput.print(report)
            }
            await ledger.close()
        } catch let error as ExitCode {
            throw error
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}

/// A progress line on standard error, redrawn in place: done/total, purchases and requests per second, time left.
final class ProgressLine: Sendable {
    let label: String
    init(label: String) { self.label = label }

    func show(_ progress: Reconciler.Progress) {
        let seconds = max(0.001, progress.elapsed / .seconds(1))
        let rate = Double(progress.done) / seconds
        let left = rate > 0 ? Double(progress.total - progress.done) / rate : 0
        let width = 30
        let filled = progress.total == 0 ? width : width * progress.done / progress.total
        let bar = String(repeating: "=", count: filled) + String(repeating: " ", count: width - filled)
        let line = String(
            format: "\r%@ [%@] %d/%d · %.1f purchases/s · %.1f requests/s · ETA %d:%02d ", label, bar, progress.done, progress.total, rate,
            Double(progress.requests) / seconds, Int(left) / 60, Int(left) % 60
        )
        FileHandle.standardError.write(Data(line.utf8))
    }

    /// A count without a total (records copied).
    func show(count: Int) {
        FileHandle.standardError.write(Data("\r\(label): \(count) records ".utf8))
    }

    func finish() { FileHandle.standardError.write(Data("\n".utf8)) }
}
