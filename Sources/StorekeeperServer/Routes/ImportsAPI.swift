import AppStoreModels
import AppStoreReceipts
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import ServiceLifecycle
import StorekeeperCore
import StorekeeperHTTP
import Synchronization

/// `storekeeper import` run by the server (admin keys only): `POST /v1/admin/imports[?bundleId=…&environment=…]` with
/// the list as its body (`text/csv`, at most 1 MiB: `customerId,transactionId` or `customerId,<base64 receipt>` per
/// line) starts it and answers 202 with its ID; `GET /v1/admin/imports/{id}` follows its progress and report;
/// `DELETE /v1/admin/imports/{id}` stops it between lines; `GET /v1/admin/imports` lists this instance's. An import
/// runs on the instance that took it, in memory: one the process loses (a restart) is started again by posting the
/// list again — every line already imported is then `known`. A server stopped gracefully stops its import first, saying
/// so in its log. For a list over 1 MiB, or to resume after a crash without asking again, use the command.
struct ImportsAPI: Sendable {
    let configuration: ServerConfiguration
    let importers: [VerifierKey: AccountImporter]
    let receiptVerifiers: [String: ReceiptVerifier]
    let imports: ImportRegistry

    struct Status: Encodable {
        var id: String
        /// `running`, `finished` or `stopped`.
        var state: String
        var progress: CustomerImport.Progress
    }

    static func status(_ entry: ImportRegistry.Entry) -> Status {
        let progress = entry.run.progress
        let state = progress.finishedAt == nil ? "running" : progress.stopped == nil ? "finished" : "stopped"
        return Status(id: entry.id, state: state, progress: progress)
    }

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.post("/admin/imports") { request, context in
            try Self.requireAdmin(context)
            return try await start(request, context)
        }
        group.get("/admin/imports") { request, context in
            try Self.requireAdmin(context)
            _ = try QueryParameters(request, allowed: [])
            return StorekeeperApplication.jsonResponse(["imports": imports.all.map(Self.status)])
        }
        group.get("/admin/imports/:importId") { request, context in
            try Self.requireAdmin(context)
            _ = try QueryParameters(request, allowed: [])
            return StorekeeperApplication.jsonResponse(Self.status(try find(context)))
        }
        group.delete("/admin/imports/:importId") { request, context in
            try Self.requireAdmin(context)
            _ = try QueryParameters(request, allowed: [])
            let entry = try find(context)
            let keyName = (try? context.requireIdentity().name) ?? ""
            guard await entry.stop("stopped by admin key \(keyName)") else {
                let how = entry.run.progress.stopped.map { "stopped already (\(UntrustedText.escaped($0, limit: 200)))" } ?? "finished already"
                throw APIError(.conflict, .importNotRunning, "import \(entry.id) is not running: it \(how)")
            }
            return StorekeeperApplication.jsonResponse(Self.status(entry))
        }
    }

    func find(_ context: StorekeeperRequestContext) throws -> ImportRegistry.Entry {
        // Percent-decoded, as the other routes' IDs are, before it is looked up or repeated.
        let id = context.pathValue("importId")
        guard let entry = imports.find(id) else {
            throw APIError(.notFound, .unknownImport, "no import \(UntrustedText.quoted(id, limit: 64)) on this instance")
        }
        return entry
    }

    static func requireAdmin(_ context: StorekeeperRequestContext) throws {
        guard try context.requireIdentity().isAdmin else { throw APIError(.forbidden, .adminOnly, "imports take an admin API key") }
    }

    func start(_ request: Request, _ context: StorekeeperRequestContext) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let buffer = try await StorekeeperApplication.readBody(request)
        guard let text = String(validating: buffer.readableBytesView, as: UTF8.self) else {
            throw APIError(
                .badRequest, .malformedBody, "the body must be the list as UTF-8 text (customerId,transactionId or customerId,receipt per line)")
        }
        let (lines, malformed) = CustomerImport.parse(text, isCustomerId: isCustomerId)
        guard !lines.isEmpty || !malformed.isEmpty else {
            throw APIError(.badRequest, .malformedBody, "the list is empty: give customerId,transactionId or customerId,receipt per line")
        }
        // The app and environment of lines that give a transaction ID.
        let asked = query.string("bundleId")
        let environment = try query.environment()
        let candidates = importers.keys.filter { (asked == nil || $0.bundleId == asked) && (environment == nil || $0.environment == environment) }
        let defaultApp = candidates.count == 1 ? candidates.first : nil
        if defaultApp == nil, lines.contains(where: { if case .transactionId = $0.source { true } else { false } }) {
            throw APIError(
                .badRequest, .noCredentials,
                "lines give transaction IDs, and \(candidates.isEmpty ? "no" : "\(candidates.count)") apps and environments with App Store Server API credentials match: give bundleId and environment"
            )
        }
        let id = "imp_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        let run = CustomerImport.Run(total: lines.count + malformed.count)
        for result in malformed { run.record(result) }
        let entry = ImportRegistry.Entry(id: String(id), run: run)
        // One at a time on an instance: two imports would share the App Store's rate budget (a second of the same list
        // ran it twice), and starve the other calls of it.
        if let running = imports.addUnlessRunning(entry) {
            throw APIError(
                .conflict, .importRunning,
                "import \(running.id) is still running on this instance (one import at a time): follow it at /v1/admin/imports/\(running.id)")
        }
        let keyName = (try? context.requireIdentity().name) ?? ""
        let logger = context.logger
        logger.info(
            "import started",
            metadata: ["import.id": .string(String(id)), "api_key": .string(keyName), "import.lines": .stringConvertible(run.progress.total)])
        let (importers, receiptVerifiers, apps) = (self.importers, self.receiptVerifiers, configuration.apps)
        entry.started(
            Task {
                do {
                    try await run.run(
                        lines,
                        resolve: { line in
                            ReceiptMigrationAPI.resolve(
                                line, importers: importers, defaultApp: defaultApp, receiptVerifiers: receiptVerifiers, apps: apps, bundleId: asked)
                        }, done: { _ in })
                    run.finish(stopped: entry.stopReason)
                } catch {
                    run.finish(stopped: entry.stopReason ?? "\(error)")
                }
                let progress = run.progress
                var metadata: Logger.Metadata = [
                    "import.id": .string(String(id)), "api_key": .string(keyName),
                    "import.done": .stringConvertible(progress.done), "import.lines": .stringConvertible(progress.total),
                ]
                // Only a stopped import says why (a finished one logged an empty `import.stopped=`).
                if let stopped = progress.stopped { metadata["import.stopped"] = .string(UntrustedText.escaped(stopped, limit: 300)) }
                logger.info(progress.stopped == nil ? "import finished" : "import stopped", metadata: metadata)
            })
        struct Started: Encodable {
            var id: String
            var total: Int
            var status: String
        }
        return StorekeeperApplication.jsonResponse(
            Started(id: String(id), total: lines.count + malformed.count, status: "/v1/admin/imports/\(id)"), status: .accepted)
    }
}

extension APIError.Code {
    /// No import of that ID on this instance (404).
    static let unknownImport = Self(rawValue: "unknown-import")
    /// Another import is still running on this instance (409).
    static let importRunning = Self(rawValue: "import-running")
    /// The import to stop has finished or been stopped already (409).
    static let importNotRunning = Self(rawValue: "import-not-running")
}

/// The imports this instance runs or ran (the last 100). A service of the application: at a graceful shutdown it
/// stops the running import (between lines) before the store closes, and logs it.
package final class ImportRegistry: Service {
    /// One import: its progress, and what stops it.
    final class Entry: Sendable {
        let id: String
        let run: CustomerImport.Run
        private let control = Mutex<(task: Task<Void, Never>?, stopReason: String?)>((nil, nil))

        init(id: String, run: CustomerImport.Run) {
            self.id = id
            self.run = run
        }

        /// The task running it (stopped at once if a stop came first).
        func started(_ task: Task<Void, Never>) {
            control.withLock {
                $0.task = task
                if $0.stopReason != nil { task.cancel() }
            }
        }

        /// Why it was asked to stop, if it was.
        var stopReason: String? { control.withLock { $0.stopReason } }

        /// Stops it between lines (a line in flight is given up, its request cancelled), for `reason`, and returns
        /// once it has. False when it had finished or been stopped already.
        func stop(_ reason: String) async -> Bool {
            let (task, stopping) = control.withLock { control -> (Task<Void, Never>?, Bool) in
                guard control.stopReason == nil, run.progress.finishedAt == nil else { return (control.task, false) }
                control.stopReason = reason
                return (control.task, true)
            }
            task?.cancel()
            await task?.value
            return stopping
        }
    }

    private let entries = Mutex<[Entry]>([])

    /// Adds `entry` unless an import is still running on this instance: that one, then.
    func addUnlessRunning(_ entry: Entry) -> Entry? {
        entries.withLock {
            if let running = $0.first(where: { $0.run.progress.finishedAt == nil }) { return running }
            $0.append(entry)
            if $0.count > 100 { $0.removeFirst($0.count - 100) }
            return nil
        }
    }

    func find(_ id: String) -> Entry? { entries.withLock { $0.first { $0.id == id } } }
    var all: [Entry] { entries.withLock { $0 } }

    /// Waits for the application's shutdown, then stops what runs (its end is logged by the import's task).
    package func run() async throws {
        try? await gracefulShutdown()
        for entry in all where entry.run.progress.finishedAt == nil {
            _ = await entry.stop("the server was stopped: post the list again to finish (the lines imported are then known)")
        }
    }
}
