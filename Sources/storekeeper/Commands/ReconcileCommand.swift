import AppStoreModels
import AppStoreServerAPI
import ArgumentParser
import Foundation
import Logging
import StorekeeperCore
import StorekeeperServer
import Synchronization

struct ReconcileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Compare the ledger with the App Store (statuses and transaction history) and repair it.",
        discussion: """
            Prints a JSON report per app and environment: every difference found, field by field (missing-transaction, \
            stale-transaction, revoked, stale-status, missing-renewal-info, stale-renewal-info), and how many records \
            changed. Older App Store data never overwrites newer ledger data. With --all, a progress line on standard \
            error, and the job's lease in the ledger (one --all per app at a time, whatever process runs it). Calls are \
            paced under Apple's rate limits. A run that stops (an error, Ctrl-C) prints what it had checked and repaired \
            ("complete": false) and exits 1 (130 on Ctrl-C, after giving the lease back).
            """
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Option(help: ArgumentHelp(stringLiteral: "The ledger (it must exist): " + LedgerDatabase.help)) var database: String = "storekeeper.sqlite"
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
        if let customer, !isCustomerId(customer) {
            throw ValidationError(
                "--customer \(UntrustedText.quoted(customer, limit: 64)) is not a customer ID (1-128 ASCII letters, digits and -_.@:)")
        }
        if let id = originalTransactionId, id.isEmpty || !id.allSatisfy(\.isASCII) || !id.allSatisfy(\.isNumber) {
            throw ValidationError("--original-transaction-id must be digits, not '\(id.prefix(64))'")
        }
        if let environment, !["Production", "Sandbox"].contains(environment) {
            throw ValidationError("--environment must be Production or Sandbox, not '\(environment.prefix(64))'")
        }
    }

    func run() async throws {
        let interruption = Interruption()
        do {
            let configuration = try ServerConfiguration.load(path: config)
            if let bundleId, !configuration.apps.contains(where: { $0.bundleId == bundleId }) {
                throw CLIError(
                    code: "unknown-app",
                    message: "no app '\(bundleId.prefix(128))' in \(config) (apps: \(configuration.apps.map(\.bundleId).joined(separator: ", ")))")
            }
            let verifiers = try configuration.makeVerifiers()
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .warning
            let clients = try configuration.makeServerAPIClients(logger: logger).filter { app, _ in
                (bundleId == nil || app.bundleId == bundleId) && (environment == nil || app.environment.rawValue == environment)
            }
            guard !clients.isEmpty else {
                throw CLIError(code: "no-credentials", message: "no app in \(config) matching the options has serverAPI credentials")
            }
            let scope: Reconciler.Scope =
                customer.map { .customer($0) } ?? originalTransactionId.map { .originalTransactionId($0) } ?? .allSubscriptions
            let failed = try await LedgerDatabase.withOpened(database, access: .existing, logger: logger) { ledger in
                let store = ledger.store
                var failed = false
                for (app, client) in clients.sorted(by: { $0.key.description < $1.key.description }) where interruption.signal == nil {
                    guard let verifier = verifiers[app] else { continue }
                    let reconciler = Reconciler(app: app, client: client, verifier: verifier, store: store, logger: logger)
                    let bar: ProgressLine? = all ? ProgressLine(label: "\(app)") : nil
                    let progress: (@Sendable (Reconciler.Progress) -> Void)?
                    if let bar { progress = { bar.show($0) } } else { progress = nil }
                    // One `reconcile --all` per app at a time on one ledger (each paces itself to Apple's whole limit).
                    let lease =
                        all
                        ? JobLease(
                            store: store, job: "reconcile all \(app.bundleId) \(app.environment.rawValue)", duration: configuration.jobLeaseDuration)
                        : nil
                    do {
                        if let lease, try await !lease.acquire() {
                            let holder = await lease.holderNow().map { " (\($0))" } ?? ""
                            throw CLIError(
                                code: "job-running", message: "another `storekeeper reconcile --all` for \(app) is running on this ledger\(holder)")
                        }
                        let dryRun = self.dryRun
                        let report = try await interruption.run {
                            if let lease {
                                return try await lease.whileHolding { try await reconciler.reconcile(scope, dryRun: dryRun, progress: progress) }
                            }
                            return try await reconciler.reconcile(scope, dryRun: dryRun, progress: progress)
                        }
                        await lease?.release()
                        bar?.finish()
                        try JSONOutput.print(report)
                    } catch let stopped as Reconciler.Stopped {
                        failed = true
                        await lease?.release()
                        bar?.finish()
                        try JSONOutput.print(stopped.report)
                        let why = interruption.signal != nil ? "interrupted" : "\(stopped.cause)"
                        reportError(
                            """
                            \(app): reconcile stopped after \(stopped.report.checked) of \(stopped.report.purchases) purchases \
                            (\(stopped.report.recordsChanged) records repaired, kept): \(why)
                            """)
                    } catch is Reconciler.UnknownCustomer {
                        failed = true
                        reportError("\(app): no customer '\(customer?.prefix(128) ?? "")' in this ledger")
                    } catch {
                        failed = true
                        await lease?.release()
                        bar?.finish()
                        reportError("\(app): \(error)")
                    }
                }
                return failed
            }
            if let code = interruption.exitCode { throw code }
            if failed { throw ExitCode.failure }
        } catch let error as ExitCode {
            throw error
        } catch {
            reportError("\(error)")
            throw ExitCode.failure(for: error)
        }
    }
}

/// A progress line on standard error, redrawn in place: done/total, purchases and requests per second, time left.
final class ProgressLine: Sendable {
    let label: String
    private let shown = Mutex(false)
    init(label: String) { self.label = label }

    func show(_ progress: Reconciler.Progress) {
        show(done: progress.done, total: progress.total, requests: progress.requests, seconds: progress.elapsed / .seconds(1), unit: "purchases")
    }

    func show(done: Int, total: Int, requests: Int, seconds elapsed: Double, unit: String) {
        let seconds = max(0.001, elapsed)
        let rate = Double(done) / seconds
        let left = rate > 0 ? Double(total - done) / rate : 0
        let width = 30
        let filled = total == 0 ? width : width * min(done, total) / total
        let bar = String(repeating: "=", count: filled) + String(repeating: " ", count: width - filled)
        let line = String(
            format: "\r%@ [%@] %d/%d · %.1f %@/s · %.1f requests/s · ETA %d:%02d ", label, bar, done, total, rate, unit,
            Double(requests) / seconds, Int(left) / 60, Int(left) % 60
        )
        shown.withLock { $0 = true }
        try? FileHandle.standardError.write(contentsOf: Data(line.utf8))
    }

    /// A count without a total (records copied).
    func show(count: Int) {
        shown.withLock { $0 = true }
        try? FileHandle.standardError.write(contentsOf: Data("\r\(label): \(count) records ".utf8))
    }

    /// Ends the line, if one was drawn.
    func finish() {
        let wasShown = shown.withLock { value -> Bool in
            let old = value
            value = false
            return old
        }
        if wasShown { try? FileHandle.standardError.write(contentsOf: Data("\n".utf8)) }
    }
}
