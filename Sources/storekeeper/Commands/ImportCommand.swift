import AppStoreModels
import AppStoreReceipts
import AppStoreServerAPI
import ArgumentParser
import Crypto
import Foundation
import Logging
import StorekeeperCore
import StorekeeperHTTP
import StorekeeperServer
import Synchronization

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import customers from another backend: one customer ID and one transaction ID (or app receipt) per line.",
        discussion: """
            Each line of --file is `customerId,transactionId` (any transaction ID of the customer's Apple account, \
            usually the original one from the old database) or `customerId,<base64 app receipt>` (verified first: \
            signature, chain, app). For each, the account's statuses and history are fetched from the App Store, \
            verified, applied to the ledger and linked to the customer under the ownership rules and the restore \
            policy. Calls are paced at 95 % of Apple's rate limits, 8 customers at a time.

            Resumable: each line's result is appended to the journal (--journal, default FILE.journal) as it is known; \
            a run stopped by Ctrl-C, a crash or the App Store failing continues, when started again, after the lines \
            already done. A progress line on standard error; the report (counts of imported, known, refused and \
            failed lines, and the first 100 refused or failed lines with why) on standard output. One import of a \
            file at a time per ledger (a job lease). Exit status: 0 every line imported or known, 3 done with refused \
            or failed lines, 1 stopped (run it again to continue), 130 on Ctrl-C.
            """
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Option(help: ArgumentHelp(stringLiteral: "The ledger (it must exist): " + LedgerDatabase.help)) var database: String = "storekeeper.sqlite"
    @Option(help: "The customers: customerId,transactionId or customerId,<base64 receipt> per line.") var file: String
    @Option(help: "Where each line's result is kept, to resume (default: FILE.journal).") var journal: String?
    @Option(help: "The app of the transaction IDs (default: the only app with serverAPI credentials).") var bundleId: String?
    @Option(help: "The environment of the transaction IDs, Production or Sandbox (default: the app's only one with credentials).")
    var environment: String?
    @Option(help: "Customers imported at once (1-64).") var concurrency: Int = 8

    func validate() throws {
        if let environment, !["Production", "Sandbox"].contains(environment) {
            throw ValidationError("--environment must be Production or Sandbox, not \(UntrustedText.quoted(environment, limit: 64))")
        }
        guard (1...64).contains(concurrency) else { throw ValidationError("--concurrency must be 1 to 64, not \(concurrency)") }
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
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory) else {
                throw CLIError(code: "unreadable-file", message: "\(file) does not exist")
            }
            guard !isDirectory.boolValue else { throw CLIError(code: "unreadable-file", message: "\(file) is a directory, not a list of customers") }
            // A device or a pipe (/dev/zero, a FIFO) has no end to read to, and a journal of its lines could not resume.
            guard LocalFile.isRegular(file) else {
                throw CLIError(
                    code: "unreadable-file", message: "\(file) is not a regular file (a device or a pipe?): give the file of customers itself")
            }
            // Standard input (/dev/stdin, /proc/self/fd/0) redirected from a file reads as one, but no journal can go beside it.
            let standardPath = URL(fileURLWithPath: file).standardizedFileURL.path
            if self.journal == nil, standardPath.hasPrefix("/proc/") || standardPath.hasPrefix("/dev/") && !standardPath.hasPrefix("/dev/shm/") {
                throw CLIError(
                    code: "journal-needed",
                    message: "\(file) is not a file in a directory (standard input?): give --journal PATH, where each line's result is kept to resume"
                )
            }
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: file))
            } catch {
                let reason = (error as NSError).localizedFailureReason ?? (error as NSError).localizedDescription
                throw CLIError(code: "unreadable-file", message: "cannot read \(file): \(reason)")
            }
            guard !data.isEmpty else { throw CLIError(code: "malformed-file", message: "\(file) is empty") }
            guard let text = String(data: data, encoding: .utf8) else {
                throw CLIError(code: "malformed-file", message: "\(file) is not UTF-8 text")
            }
            let (lines, malformed) = CustomerImport.parse(text, isCustomerId: isCustomerId)
            let fingerprint = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
            let journal = try ImportJournal(path: self.journal ?? file + ".journal", fingerprint: fingerprint, file: file)
            let verifiers = try configuration.makeVerifiers()
            let receiptVerifiers = try configuration.makeReceiptVerifiers()
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .warning
            let clients = try configuration.makeServerAPIClients(logger: logger)
            guard !clients.isEmpty else { throw CLIError(code: "no-credentials", message: "no app in \(config) has serverAPI credentials") }
            // The app and environment of lines that give a transaction ID.
            let candidates = clients.keys.filter {
                (bundleId == nil || $0.bundleId == bundleId) && (environment == nil || $0.environment.rawValue == environment)
            }
            let defaultApp: VerifierKey? = candidates.count == 1 ? candidates.first : nil
            if defaultApp == nil, lines.contains(where: { if case .transactionId = $0.source { true } else { false } }) {
                throw CLIError(
                    code: candidates.isEmpty ? "no-credentials" : "ambiguous-app",
                    message:
                        "lines give transaction IDs, and \(candidates.isEmpty ? "no" : "\(candidates.count)") apps and environments with credentials match: give --bundle-id and --environment (\(clients.keys.map(\.description).sorted().joined(separator: ", ")))"
                )
            }
            let apps = configuration.apps
            let askedApp = self.bundleId
            let concurrency = self.concurrency
            let stopped = try await LedgerDatabase.withOpened(database, access: .existing, logger: logger) { ledger -> String? in
                let store = ledger.store
                let importers = configuration.makeImporters(store: store, clients: clients, verifiers: verifiers, logger: logger)
                let lease = JobLease(store: store, job: "import \(fingerprint.prefix(16))", duration: configuration.jobLeaseDuration)
                if try await !lease.acquire() {
                    let holder = await lease.holderNow().map { " (\($0))" } ?? ""
                    throw CLIError(code: "job-running", message: "another `storekeeper import` of this file is running on this ledger\(holder)")
                }
                let run = CustomerImport.Run(total: lines.count + malformed.count)
                let done = journal.done
                for result in malformed {
                    if done[result.line] == nil { try journal.append(result) }
                    run.record(result, skipped: done[result.line] != nil)
                }
                let bar = ProgressLine(label: "import")
                let ticker = Task {
                    while !Task.isCancelled {
                        let progress = run.progress
                        bar.show(
                            done: progress.done, total: progress.total, requests: progress.requests,
                            seconds: Date().timeIntervalSince(progress.startedAt), unit: "customers")
                        try? await Task.sleep(for: .milliseconds(500))
                    }
                }
                var stopped: String?
                do {
                    try await interruption.run {
                        try await lease.whileHolding {
                            try await run.run(
                                lines, alreadyDone: done, concurrency: concurrency,
                                resolve: { line in
                                    ReceiptMigrationAPI.resolve(
                                        line, importers: importers, defaultApp: defaultApp, receiptVerifiers: receiptVerifiers, apps: apps,
                                        bundleId: askedApp)
                                },
                                done: { try journal.append($0) })
                        }
                    }
                } catch let error as CustomerImport.Stopped {
                    stopped = interruption.signal != nil ? "interrupted" : error.description
                } catch {
                    stopped = interruption.signal != nil ? "interrupted" : "\(error)"
                }
                ticker.cancel()
                _ = await ticker.result
                let progress = run.progress
                bar.show(
                    done: progress.done, total: progress.total, requests: progress.requests, seconds: Date().timeIntervalSince(progress.startedAt),
                    unit: "customers")
                bar.finish()
                await lease.release()
                run.finish(stopped: stopped)
                try JSONOutput.print(run.progress)
                return stopped
            }
            if let code = interruption.exitCode { throw code }
            if let stopped {
                reportError("the import stopped (\(stopped)); run the same command again to continue")
                throw ExitCode.failure
            }
            if !malformed.isEmpty || (try? journal.hasProblems()) == true { throw ExitCode(3) }
        } catch let error as ExitCode {
            throw error
        } catch {
            reportError("\(error)")
            throw ExitCode.failure(for: error)
        }
    }
}

/// The import's journal: a first line naming the file it belongs to (its SHA-256), then one JSON result per line
/// done, appended and flushed to disk as each is known, so that a run started again skips them.
final class ImportJournal: Sendable {
    let path: String
    private let handle: Mutex<FileHandle>
    let done: [Int: CustomerImport.LineResult]

    struct Header: Codable {
        var storekeeperImport: String
        var file: String
    }

    init(path: String, fingerprint: String, file: String) throws {
        self.path = path
        var done: [Int: CustomerImport.LineResult] = [:]
        let manager = FileManager.default
        if manager.fileExists(atPath: path) {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw CLIError(code: "unreadable-journal", message: "cannot read the journal \(path)")
            }
            var rows = text.split(separator: "\n")
            guard let first = rows.first, let header = try? JSONDecoder().decode(Header.self, from: Data(first.utf8)) else {
                throw CLIError(code: "malformed-journal", message: "\(path) is not an import journal: move it away or give another --journal")
            }
            guard header.storekeeperImport == fingerprint else {
                throw CLIError(
                    code: "journal-of-another-file",
                    message:
                        "\(path) is the journal of another content of the file (it changed since the import began): move the journal away to import the new file from its start"
                )
            }
            rows.removeFirst()
            for row in rows {
                // A line cut by a crash is left out: that customer is imported again (imports are idempotent).
                guard let result = try? JSONDecoder().decode(CustomerImport.LineResult.self, from: Data(row.utf8)) else { continue }
                done[result.line] = result
            }
        } else {
            let header = try JSONEncoder().encode(Header(storekeeperImport: fingerprint, file: file))
            guard manager.createFile(atPath: path, contents: header + Data("\n".utf8)) else {
                throw CLIError(code: "unwritable-journal", message: "cannot create the journal \(path)")
            }
        }
        guard let handle = FileHandle(forWritingAtPath: path) else {
            throw CLIError(code: "unwritable-journal", message: "cannot write the journal \(path)")
        }
        let end = try handle.seekToEnd()
        // A line cut by a crash is closed, so that the next result starts a line of its own.
        if end > 0, let reader = FileHandle(forReadingAtPath: path) {
            try reader.seek(toOffset: end - 1)
            if try reader.read(upToCount: 1) != Data("\n".utf8) { try handle.write(contentsOf: Data("\n".utf8)) }
            try reader.close()
        }
        self.handle = Mutex(handle)
        self.done = done
    }

    func append(_ result: CustomerImport.LineResult) throws {
        let row = try JSONEncoder().encode(result) + Data("\n".utf8)
        try handle.withLock { handle in
            try handle.write(contentsOf: row)
            try handle.synchronize()
        }
    }

    /// Whether any line, in this run or an earlier one, was refused or failed.
    func hasProblems() throws -> Bool {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return text.split(separator: "\n").dropFirst().contains { row in
            (try? JSONDecoder().decode(CustomerImport.LineResult.self, from: Data(row.utf8))).map { $0.outcome == .refused || $0.outcome == .failed }
                ?? false
        }
    }
}
