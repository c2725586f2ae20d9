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
            for a server that is stopped, or to look (--dry-run) without changing anything.
            """
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Option(help: ArgumentHelp(stringLiteral: LedgerDatabase.help)) var database: String = "storekeeper.sqlite"
    @Option(help: "Read the history from this ISO-8601 date instead of the watermark.") var since: String?
    @Flag(help: "Read and verify, report what the ledger lacks, change nothing.") var dryRun = false

    func run() async throws {
        do {
            let configuration = try ServerConfiguration.load(path: config)
            let verifiers = try configuration.makeVerifiers()
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .warning
            let clients = try configuration.makeServerAPIClients(logger: logger)
            guard !clients.isEmpty else {
                throw CLIError(code: "no-credentials", message: "no app in \(config) has serverAPI credentials: nothing to recover from")
            }
            let since = try since.map(parseDate)
            let ledger = try await LedgerDatabase.open(database, logger: logger)
            let store = ledger.store
            let ingester = NotificationIngester(
                store: store, verifiers: verifiers, refusalsKept: configuration.refusedNotificationsKept, logger: logger
            )
            var failed = false
            for (app, client) in clients.sorted(by: { $0.key.description < $1.key.description }) {
                let recovery = NotificationRecovery(
                    app: app, client: client, ingester: ingester, settings: configuration.recovery?.settings ?? .init(), logger: logger
                )
                // A server on the same PostgreSQL database may be running this job: one caller of Apple at a time.
                let lease = JobLease(store: store, job: NotificationRecoveryService.jobName(app), duration: configuration.jobLeaseDuration)
                do {
                    guard try await lease.acquire() else {
                        throw CLIError(code: "job-running", message: "a server on this database is recovering \(app)'s notifications now (it holds the job's lease); it needs no help")
                    }
                    let report = try await lease.whileHolding { try await recovery.run(since: since, dryRun: dryRun) }
                    await lease.release()
                    try JSONOutput.print(report)
                } catch {
                    failed = true
                    FileHandle.standardError.write(Data("error: \(app): \(error)\n".utf8))
                }
            }
            await ledger.close()
            if failed { throw ExitCode.failure }
        } catch let error as ExitCode {
            throw error
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}
