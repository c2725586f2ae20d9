import AppStoreModels
package import AppStoreServerAPI
import AppStoreSigning
package import Foundation
package import Logging

/// Brings back the notifications the server missed, for one app in one environment (WWDC23's advice): Get
/// Notification History from the last watermark (less an overlap, so that a notification created while the previous
/// run read is not missed), and, less often, every notification the App Store still counts as a failed delivery
/// (`onlyFailures`: the ones this server refused, say while its configuration was wrong, or that never reached it).
/// Every payload goes through the ``NotificationIngester``'s verification; duplicates are no-ops. Each page is
/// applied in one transaction, and the watermark moves in the same commit as the last page of the run, so a crash
/// mid-run resumes from the old watermark: nothing is lost, nothing applied twice.
package struct NotificationRecovery: Sendable {
    package let app: VerifierKey
    let client: AppStoreServerAPIClient
    let ingester: NotificationIngester
    let settings: Settings
    let logger: Logger
    let metrics: StorekeeperMetrics
    let now: @Sendable () -> Date
    /// When and how far back recovery looks.
    package struct Settings: Sendable, Hashable {
        /// Between runs. Default 5 minutes.
        package var interval: Duration = .seconds(300)
        /// How far before the watermark a run starts again. Default 1 hour (covers clocks an hour apart).
        package var overlap: TimeInterval = 3_600
        /// Between passes over every failed delivery still in the history (`onlyFailures`). Default 1 hour; the
        /// first run always makes one.
        package var failuresInterval: TimeInterval = 3_600

        package init() {}
    }

    package init(
        app: VerifierKey, client: AppStoreServerAPIClient, ingester: NotificationIngester, settings: Settings = Settings(),
        logger: Logger, metrics: StorekeeperMetrics = .discarded, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.app = app
        self.client = client
        self.ingester = ingester
        self.settings = settings
        self.logger = logger
        self.metrics = metrics
        self.now = now
    }

    /// How long the App Store keeps notification history: 180 days in production, 30 in sandbox (APPSTORE-SPEC §1.4).
    var historyWindow: TimeInterval { (app.environment == .production ? 180 : 30) * 86_400 }

    /// What one run found and did.
    package struct Report: Codable, Sendable, Hashable {
        package var bundleId: String
        package var environment: String
        /// The history read: from, and the moment the run began (the App Store's own clock bounds the end). Both in the
        /// App Store's time: when its clock was found ahead of this server's (``appStoreClockAheadSeconds``), `to` is
        /// this server's start moved by as much (a window's end never comes before its start).
        package var from: Date
        package var to: Date
        /// Whether the run also read every failed delivery in the history.
        package var failuresPass: Bool
        package var dryRun: Bool
        package var pages = 0
        package var fetched = 0
        package var applied = 0
        package var recorded = 0
        package var duplicates = 0
        package var refused = 0
        /// Dry run: the notifications the ledger does not hold (type and UUID), at most 100.
        package var missing: [String] = []
        package var missingCount = 0
        package var watermarkBefore: Date?
        package var watermarkAfter: Date?
        /// Whether the run read all it had to: false when part of its window (``uncovered``) is no longer in the App
        /// Store's history, so that notifications created then can no longer be fetched.
        package var complete = true
        /// The part of the window the App Store no longer holds, when the run is not ``complete``.
        package var uncovered: DateInterval?
        /// How far ahead of this server's clock the App Store's was found to be, in seconds, when it refused a start
        /// date this server's clock says is inside its window (a simulator whose clock was advanced, say).
        package var appStoreClockAheadSeconds: Double?
    }

    /// How far past the start of a run the history requests end: the App Store clamps an end in the future to its own
    /// now, so a year covers an App Store clock up to a year ahead of this server's.
    static let endReach: TimeInterval = 366 * 86_400

    /// One run: the history since the watermark (or `since`), and every failed delivery when `failures` is set.
    /// `dryRun` reads and verifies, and reports what the ledger lacks, changing nothing. Fails with the App Store
    /// Server API's error (`AppStoreServerAPIError`) or the ledger's (``StorageError``); the watermark then stays.
    /// A run whose window began before what the App Store still holds is not ``Report/complete``; it moves the
    /// watermark all the same (what is gone cannot come back), and says which part is lost.
    package func run(since: Date? = nil, failures: Bool = true, dryRun: Bool = false) async throws -> Report {
        let started = now()
        let watermark = try await ingester.store.recoveryWatermark(app)
        // An hour inside the App Store's window, so that a request made a little later is still inside it.
        let earliest = started.addingTimeInterval(-historyWindow + Self.windowMargin)
        let requested = since ?? watermark.map { $0.addingTimeInterval(-settings.overlap) }
        var report = Report(
            bundleId: app.bundleId, environment: app.environment.rawValue, from: max(earliest, requested ?? earliest), to: started,
            failuresPass: failures, dryRun: dryRun, watermarkBefore: watermark
        )
        if let requested, requested < earliest {
            report.complete = false
            report.uncovered = DateInterval(start: requested, end: earliest)
        }
        do {
            try await read(into: &report, started: started, earliest: earliest, requested: requested, failures: failures)
        } catch {
            report.complete = false
            throw Stopped(report: report, cause: error)
        }
        if !dryRun {
            metrics.credentials(bundleId: app.bundleId, environment: app.environment.rawValue, refused: false)
            if report.complete {
                metrics.recoveryRun(
                    bundleId: app.bundleId, environment: app.environment.rawValue, finishedAt: now(),
                    lagSeconds: max(0, now().timeIntervalSince(started))
                )
            }
        }
        return report
    }

    /// A run that stopped before its end (the App Store or the ledger failed, or its task was cancelled, e.g. by
    /// Ctrl-C): what it had fetched and applied until then (each page applied stays applied; the watermark moves only
    /// with a run's last page), and why it stopped.
    package struct Stopped: Error, Sendable, CustomStringConvertible {
        package var report: Report
        package var cause: any Error & Sendable
        package var description: String { "\(cause)" }
    }

    /// The two passes of a run: the history from the window's start (its last page moves the watermark), then every
    /// failed delivery still in the App Store's history (when `failures`).
    private func read(into report: inout Report, started: Date, earliest: Date, requested: Date?, failures: Bool) async throws {
        let end = started.addingTimeInterval(Self.endReach)
        var seen = Set<String>()
        // The watermark names the App Store's clock: when it is ahead of ours, the next run starts where this one ended.
        // Only an offset found in this run counts: one found earlier may be stale (a clock set right since), and a
        // watermark ahead of the App Store's time would skip what it creates meanwhile. A watermark ahead of this
        // server's clock says the App Store's was ahead at the last run: measured again now, before the watermark moves
        // (else each other run would set it back to this server's time, and the next find its start out of the window).
        let measured =
            (report.watermarkBefore ?? .distantPast) > started.addingTimeInterval(60)
            ? try await appStoreClockAhead(started: started, end: end) : nil
        let main = try await self.read(
            NotificationHistoryRequest(startDate: report.from, endDate: end), into: &report, seen: &seen,
            watermark: { ahead in RecoveryWatermark(app: app, date: started.addingTimeInterval(ahead ?? measured ?? 0)) }
        )
        // How far ahead of ours the App Store's clock is, when a refused start date shows it.
        var offset = main.clockAhead ?? measured
        if main.clockAhead != nil, requested != nil {
            // Moved forward only to what the App Store's clock allows, and an hour inside it: what lay before is gone
            // (a first run asks for the App Store's own earliest, an hour inside too, as a run by this server's clock does).
            report.complete = false
            report.uncovered = DateInterval(start: report.uncovered?.start ?? report.from, end: main.start)
        }
        report.from = main.start
        if !report.dryRun { report.watermarkAfter = started.addingTimeInterval(main.clockAhead ?? measured ?? 0) }
        if failures {
            let pass = try await self.read(
                NotificationHistoryRequest(startDate: earliest.addingTimeInterval(offset ?? 0), endDate: end, onlyFailures: true),
                into: &report, seen: &seen, watermark: nil
            )
            offset = pass.clockAhead ?? offset
        }
        report.appStoreClockAheadSeconds = offset.map { $0.rounded() }
        if let offset { report.to = started.addingTimeInterval(offset) }
    }

    /// How far ahead of this server's clock the App Store's is, found by asking for its whole window by this server's
    /// clock (failed deliveries only: one page) and seeing how far forward the start must move; nil when it need not.
    private func appStoreClockAhead(started: Date, end: Date) async throws -> TimeInterval? {
        var request = NotificationHistoryRequest(
            startDate: started.addingTimeInterval(-historyWindow + Self.windowMargin), endDate: end, onlyFailures: true)
        var edge: Date?
        _ = try await firstPage(&request, edge: &edge)
        return edge.map { $0.addingTimeInterval(historyWindow).timeIntervalSince(now()) }
    }

    /// What reading one request found of the App Store's clock.
    struct Read {
        /// The start date read from: the request's, unless the App Store's clock is ahead of ours (then an hour after the
        /// earliest it accepted).
        var start: Date
        /// How far ahead of ours the App Store's clock is, when its refusal of the request's start showed it.
        var clockAhead: TimeInterval?
    }

    /// Every page of one history request; the last page carries the watermark (made with the App Store's clock offset,
    /// when one was found) into its commit. `seen`: the UUIDs a dry run already reported (both passes can meet the
    /// same notification).
    private func read(
        _ request: NotificationHistoryRequest, into report: inout Report, seen: inout Set<String>,
        watermark: ((TimeInterval?) -> RecoveryWatermark)?
    ) async throws -> Read {
        var request = request
        var edge: Date?
        var (page, token) = try await firstPage(&request, edge: &edge)
        var read = Read(start: request.startDate)
        if let edge {
            // The App Store's window ends `historyWindow` before its now: the earliest start it took says where that is.
            read.clockAhead = edge.addingTimeInterval(historyWindow).timeIntervalSince(now())
            logger.warning(
                "notification history refused the start date: the App Store's clock is ahead of this server's",
                metadata: [
                    "app.bundle_id": .string(app.bundleId), "app.environment": .string(app.environment.rawValue),
                    "recovery.app_store_clock_ahead_seconds": .stringConvertible(Int(read.clockAhead ?? 0)),
                ])
        }
        let pages = try client.notificationHistory(request)
        while true {
            report.pages += 1
            report.fetched += page.notificationHistory.count
            try await take(page, into: &report, seen: &seen, watermark: token == nil ? watermark?(read.clockAhead) : nil)
            guard let next = token else { return read }
            (page, token) = try await pages.page(after: next)
        }
    }

    /// The first page of `request`. When the App Store refuses its start date as too far in the past
    /// (`StartDateTooFarInPastError`, 4000012) although this server's clock puts it inside the window, the App Store's
    /// clock is ahead: the start moves forward to the earliest the App Store takes (found to within a minute, doubling
    /// the step and then halving it), then an hour more, as ``run(since:failures:dryRun:)``'s own earliest is: the App
    /// Store checks the start again on every page, and its window moves on while the pages are read (a start found at
    /// the window's edge was refused on a later page). `request` is changed to it, and `edge` is the earliest start found.
    private func firstPage(
        _ request: inout NotificationHistoryRequest, edge: inout Date?
    ) async throws -> (NotificationHistoryResponse, String?) {
        if let first = try await firstPage(request, from: request.startDate) { return first }
        var refused = request.startDate
        var step: TimeInterval = 86_400
        var acceptedStart = request.startDate
        var acceptedPage: (NotificationHistoryResponse, String?)? = nil
        while acceptedPage == nil {
            let candidate = refused.addingTimeInterval(step)
            guard candidate < request.endDate else {
                throw AppStoreServerAPIError(
                    kind: .apiError,
                    message: "notification history refused every start date up to \(request.endDate): the App Store's clock is "
                        + "more than \(Int(Self.endReach / 86_400)) days ahead of this server's", errorCode: 4_000_012
                )
            }
            if let page = try await firstPage(request, from: candidate) {
                acceptedStart = candidate
                acceptedPage = page
            } else {
                refused = candidate
                step *= 2
            }
        }
        while acceptedStart.timeIntervalSince(refused) > 60 {
            let middle = refused.addingTimeInterval(acceptedStart.timeIntervalSince(refused) / 2)
            if let page = try await firstPage(request, from: middle) {
                acceptedStart = middle
                acceptedPage = page
            } else {
                refused = middle
            }
        }
        edge = acceptedStart
        let inside = acceptedStart.addingTimeInterval(Self.windowMargin)
        if inside < request.endDate, let page = try await firstPage(request, from: inside) {
            acceptedStart = inside
            acceptedPage = page
        }
        request.startDate = acceptedStart
        return acceptedPage!
    }

    /// How far inside the App Store's history window a run starts, so that its later requests are still inside it.
    static let windowMargin: TimeInterval = 3_600

    /// The first page of `request` from `start`, or nil when the App Store refuses the start as too far in the past.
    private func firstPage(_ request: NotificationHistoryRequest, from start: Date) async throws -> (NotificationHistoryResponse, String?)? {
        var candidate = request
        candidate.startDate = start
        do {
            return try await client.notificationHistory(candidate).page(after: nil)
        } catch {
            guard error.errorCode == 4_000_012 else { throw error }
            return nil
        }
    }

    /// Verifies one page (refusals kept for audit, as the webhook keeps them) and applies what verified in one
    /// transaction, with the watermark when given.
    private func take(
        _ page: NotificationHistoryResponse, into report: inout Report, seen: inout Set<String>, watermark: RecoveryWatermark?
    ) async throws {
        var verified: [VerifiedNotification] = []
        for item in page.notificationHistory {
            do throws(NotificationRefusal) {
                verified.append(try await ingester.verify(item.signedPayload))
            } catch {
                report.refused += 1
                metrics.recovered(bundleId: app.bundleId, environment: app.environment.rawValue, outcome: "rejected")
                if !report.dryRun { await ingester.refuse(error, input: Array(item.signedPayload.utf8)) }
            }
        }
        if report.dryRun {
            for notification in verified {
                let uuid = notification.payload.notificationUUID
                guard seen.insert(uuid).inserted, try await !ingester.store.containsNotification(uuid) else { continue }
                report.missingCount += 1
                if report.missing.count < 100 { report.missing.append("\(notification.payload.notificationType.rawValue) \(uuid)") }
            }
            return
        }
        let outcomes = try await ingester.store.applyRecovered(verified, watermark: watermark)
        for (notification, outcome) in zip(verified, outcomes) {
            metrics.notification(type: notification.payload.notificationType.rawValue, outcome: outcome.rawValue)
            metrics.recovered(bundleId: app.bundleId, environment: app.environment.rawValue, outcome: outcome.rawValue)
            switch outcome {
            case .applied: report.applied += 1
            case .recorded: report.recorded += 1
            case .duplicate: report.duplicates += 1
            }
            if outcome != .duplicate {
                logger.info(
                    "notification recovered",
                    metadata: [
                        "notification.uuid": .string(notification.payload.notificationUUID),
                        "notification.type": .string(notification.payload.notificationType.rawValue), "recovery.outcome": .string(outcome.rawValue),
                    ])
            }
        }
    }
}
