import AppStoreServerAPI
import ArgumentParser
import Foundation
import Logging
import StorekeeperCore
import StorekeeperServer

struct RecoverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Fetch the notifications the server missed from Get Notification History and apply them, once.",
        discussion: """
            For each app and environment with serverAPI credentials: the history since the recovery watermark (or \
            --since), and every delivery the App Store still counts as failed. Prints one JSON report per app and \
            environment. `storekeeper serve` runs the same job at start and then every few minutes; this command is \
            for a server that is stopped, or to look (--dry-run) without changing anything. It takes the job's lease in \
            the ledger, so it never runs while a server's job does (it says so and exits 1). Exits 1 when a run could \
            not cover its window (part of it is no longer in the App Store's history: its report says which), and \
            130 on Ctrl-C, after giving the lease back and printing what was done.
            """
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Option(help: ArgumentHelp(stringLiteral: "The ledger (it must exist): " + LedgerDatabase.help)) var database: String = "storekeeper.sqlite"
    @Option(help: "Read the history from this ISO-8601 date instead of the watermark.") var since: String?
    @Flag(help: "Read and verify, report what the ledger lacks, change nothing.") var dryRun = false

    /// Whether a run covered its window (a dry run's too); if not, says on standard error which part of the App
    /// Store's history is gone.
    static func covered(_ report: NotificationRecovery.Report, app: String) -> Bool {
        guard !report.complete, let lost = report.uncovered else { return true }
        reportError(
            "\(app): the run could not cover its window: the App Store's history no longer holds \(lost.start.formatted(.iso8601)) to "
                + "\(lost.end.formatted(.iso8601)); notifications of that time this server did not receive are lost "
                + "(reconcile the customers to repair their purchases)")
        return false
    }

    func run() async throws {
        let interruption = Interruption()
        do {
            let configuration = try ServerConfiguration.load(path: config)
            let verifiers = try configuration.makeVerifiers()
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .warning
            let clients = try configuration.makeServerAPIClients(logger: logger)
            // A dry run beside a server's recovery job reads at a quarter of Apple's limits, so that both stay under them.
            let besideClients = dryRun ? try configuration.makeServerAPIClients(logger: logger, share: 0.25) : [:]
            guard !clients.isEmpty else {
                throw CLIError(code: "no-credentials", message: "no app in \(config) has serverAPI credentials: nothing to recover from")
            }
            let since = try since.map(parseDate)
            // A date somewhat ahead may be the past of an App Store whose clock is ahead (a simulator's); a year ahead is not.
            if let since, since > Date().addingTimeInterval(366 * 86_400) {
                throw CLIError(
                    code: "invalid-option",
                    message: "--since \(since.formatted(.iso8601)) is more than a year in the future: give the date from which to read the history")
            }
            let failed = try await LedgerDatabase.withOpened(database, access: .existing, logger: logger) { ledger in
                let store = ledger.store
                let ingester = NotificationIngester(store: store, verifiers: verifiers, configuration: configuration, logger: logger)
                var failed = false
                for (app, client) in clients.sorted(by: { $0.key.description < $1.key.description }) where interruption.signal == nil {
                    let recovery = NotificationRecovery(
                        app: app, client: client, ingester: ingester, settings: configuration.recovery.settings, logger: logger)
                    // A server on the same ledger may be running this job: one caller of Apple at a time.
                    let lease = JobLease(store: store, job: NotificationRecoveryService.jobName(app), duration: configuration.jobLeaseDuration)
                    do {
                        let held = try await lease.acquire()
                        if !held, dryRun, let beside = besideClients[app] {
                            // A dry run changes nothing: it may look beside the server's job, more slowly.
                            let holder = await lease.holderNow().map { " (\($0))" } ?? ""
                            try? FileHandle.standardError.write(
                                contentsOf:
                                    Data(
                                        "note: \(app): a server on this ledger runs the recovery job\(holder); this dry run reads beside it at a quarter of Apple's rate limits\n"
                                            .utf8
                                    ))
                            let looking = NotificationRecovery(
                                app: app, client: beside, ingester: ingester, settings: configuration.recovery.settings, logger: logger)
                            let report = try await interruption.run { try await looking.run(since: since, dryRun: true) }
                            try JSONOutput.print(report)
                            if !Self.covered(report, app: "\(app)") { failed = true }
                            continue
                        }
                        guard held else {
                            let holder = await lease.holderNow().map { " (\($0))" } ?? ""
                            throw CLIError(
                                code: "job-running",
                                message: "a server on this ledger runs \(app)'s notification recovery job\(holder) and holds its lease between runs: "
                                    + "it needs no help; its log says what each run found, or stop it to run this one"
                            )
                        }
                        let dryRun = self.dryRun
                        let report = try await interruption.run {
                            try await lease.whileHolding { try await recovery.run(since: since, dryRun: dryRun) }
                        }
                        await lease.release()
                        try JSONOutput.print(report)
                        if !Self.covered(report, app: "\(app)") { failed = true }
                    } catch let stopped as NotificationRecovery.Stopped {
                        failed = true
                        await lease.release()
                        try JSONOutput.print(stopped.report)
                        let why = interruption.signal != nil ? "interrupted" : "\(stopped.cause)"
                        let watermark =
                            stopped.report.watermarkAfter == nil
                            ? "the watermark did not move"
                            : "the watermark moved with the history's last page; the pass over failed deliveries did not finish"
                        // The cause comes from the ledger or the App Store: escaped, bounded and masked like every error line.
                        reportError(
                            "\(app): recovery stopped after \(stopped.report.pages) page(s), \(stopped.report.applied) applied (kept; \(watermark)): \(why)"
                        )
                    } catch {
                        failed = true
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
