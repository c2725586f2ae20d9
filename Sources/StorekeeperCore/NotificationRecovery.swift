import AppStoreModels
public import AppStoreServerAPI
import AppStoreSigning
public import Foundation
public import Logging

/// Brings back the notifications the server missed, for one app in one environment (WWDC23's advice): Get
/// Notification History from the last watermark (less an overlap, so that a notification created while the previous
/// run read is not missed), and, less often, every notification the App Store still counts as a failed delivery
/// (`onlyFailures`: the ones this server refused, say while its configuration was wrong, or that never reached it).
/// Every payload goes through the ``NotificationIngester``'s verification; duplicates are no-ops. Each page is
/// applied in one transaction, and the watermark moves in the same commit as the last page of the run, so a crash
/// mid-run resumes from the old watermark: nothing is lost, nothing applied twice.
public struct NotificationRecovery: Sendable {
    public let app: VerifierKey
    let client: AppStoreServerAPIClient
    let ingester: NotificationIngester
    let settings: Settings
    let logger: Logger
    let metrics: StorekeeperMetrics
    let now: @Sendable () -> Date

    /// When and how far back recovery looks.
    public struct Settings: Sendable, Hashable {
        /// Between runs. Default 5 minutes.
        public var interval: Duration = .seconds(300)
        /// How far before the watermark a run starts again. Default 1 hour (covers clocks an hour apart).
        public var overlap: TimeInterval = 3_600
        /// Between passes over every failed delivery still in the history (`onlyFailures`). Default 1 hour; the
        /// first run always makes one.
        public var failuresInterval: TimeInterval = 3_600

        public init() {}
    }

    public init(
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
    public struct Report: Codable, Sendable, Hashable {
        public var bundleId: String
        public var environment: String
        /// The history read: from, and the moment the run began (the App Store's own clock bounds the end).
        public var from: Date
        public var to: Date
        /// Whether the run also read every failed delivery in the history.
        public var failuresPass: Bool
        public var dryRun: Bool
        public var pages = 0
        public var fetched = 0
        public var applied = 0
        public var recorded = 0
        public var duplicates = 0
        public var refused = 0
        /// Dry run: the notifications the ledger does not hold (type and UUID), at most 100.
        public var missing: [String] = []
        public var missingCount = 0
        public var watermarkBefore: Date?
        public var watermarkAfter: Date?
    }

    /// One run: the history since the watermark (or `since`), and every failed delivery when `failures` is set.
    /// `dryRun` reads and verifies, and reports what the ledger lacks, changing nothing. Fails with the App Store
    /// Server API's error (``AppStoreServerAPIError``) or the ledger's (``StorageError``); the watermark then stays.
    public func run(since: Date? = nil, failures: Bool = true, dryRun: Bool = false) async throws -> Report {
        let started = now()
        let watermark = try await ingester.store.recoveryWatermark(app)
        let earliest = started.addingTimeInterval(-historyWindow + 3_600)
        let from = max(earliest, since ?? watermark.map { $0.addingTimeInterval(-settings.overlap) } ?? earliest)
        var report = Report(
            bundleId: app.bundleId, environment: app.environment.rawValue, from: from, to: started, failuresPass: failures, dryRun: dryRun,
            watermarkBefore: watermark
        )
        // The App Store clamps an end in the future to its own now, so a clock ahead of ours loses nothing.
        let end = started.addingTimeInterval(86_400)
        var seen = Set<String>()
        try await read(
            NotificationHistoryRequest(startDate: from, endDate: end), into: &report, seen: &seen, watermark: RecoveryWatermark(app: app, date: started)
        )
        if failures {
            try await read(NotificationHistoryRequest(startDate: earliest, endDate: end, onlyFailures: true), into: &report, seen: &seen, watermark: nil)
        }
        if !dryRun {
            report.watermarkAfter = started
            metrics.recoveryRun(
                bundleId: app.bundleId, environment: app.environment.rawValue, finishedAt: now(),
                lagSeconds: max(0, now().timeIntervalSince(started))
            )
        }
        return report
    }

    /// Every page of one history request; the last page carries `watermark` into its commit. `seen`: the UUIDs a dry
    /// run already reported (both passes can meet the same notification).
    private func read(
        _ request: NotificationHistoryRequest, into report: inout Report, seen: inout Set<String>, watermark: RecoveryWatermark?
    ) async throws {
        var request = request
        var pages = try client.notificationHistory(request)
        var token: String? = nil
        var shifts = 0
        repeat {
            let page: NotificationHistoryResponse
            let next: String?
            do {
                (page, next) = try await pages.page(after: token)
            } catch {
                guard error.errorCode == 4_000_012, token == nil, shifts < 60 else { throw error }
                // The App Store's clock is ahead of ours (a simulator whose clock was advanced): start a day later.
                shifts += 1
                request.startDate = request.startDate.addingTimeInterval(86_400)
                logger.warning("notification history refused the start date; the App Store's clock is ahead of this server's", metadata: [
                    "app.bundle_id": .string(app.bundleId), "app.environment": .string(app.environment.rawValue),
                ])
                pages = try client.notificationHistory(request)
                continue
            }
            token = next
            report.pages += 1
            report.fetched += page.notificationHistory.count
            try await take(page, into: &report, seen: &seen, watermark: next == nil ? watermark : nil)
        } while token != nil
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
                logger.info("notification recovered", metadata: [
                    "notification.uuid": .string(notification.payload.notificationUUID),
                    "notification.type": .string(notification.payload.notificationType.rawValue), "recovery.outcome": .string(outcome.rawValue),
                ])
            }
        }
    }
}
