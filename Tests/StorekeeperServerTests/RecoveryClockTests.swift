import AppStoreModels
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

/// Recovery when the App Store's clock is not the server's: a simulator advanced days ahead, and a window the App
/// Store's history no longer covers. A run that could not read everything it had to says so: in its report, its log
/// line, its metric and `recover`'s exit status; never success.
@Suite("Storekeeper server: recovery and the App Store's clock")
struct RecoveryClockTests {
    typealias T = RecoveryTestbed
    static let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)

    /// The recovery job of the testbed's app, its ledger, metrics and log, with the server's clock stopped at the
    /// simulator's start (the simulator's clock moves on, this server's does not).
    struct Fixture {
        let store: SQLiteLedgerStore
        let serverNow: Date
        let exporter: MetricsExporter
        let log: CapturedLog
        let recovery: NotificationRecovery
    }

    static func fixture(_ testbed: T, simulatorURL: String) async throws -> Fixture {
        let store = try SQLiteLedgerStore(path: testbed.database)
        let now = await testbed.simulator.state.now
        let configuration = try testbed.configuration(baseURL: simulatorURL)
        let exporter = MetricsExporter()
        let log = CapturedLog()
        let ingester = NotificationIngester(
            store: store, verifiers: try configuration.makeVerifiers(), configuration: configuration, logger: log.logger())
        let client = try #require(try configuration.makeServerAPIClients(logger: log.logger())[app])
        let recovery = NotificationRecovery(
            app: app, client: client, ingester: ingester, settings: configuration.recovery.settings, logger: log.logger(), metrics: exporter.metrics,
            now: { now }
        )
        return Fixture(store: store, serverNow: now, exporter: exporter, log: log, recovery: recovery)
    }

    /// Customers buy while no server listens (the simulator has no notification URL): what recovery must bring back.
    static func purchasesWhileDown(_ testbed: T, customers: [String]) async throws -> Set<String> {
        let before = Set(await testbed.simulator.state.notifications.map(\.notificationUUID))
        try await testbed.act { (engine) throws(SimulatorError) in
            for customer in customers {
                try engine.createCustomer(id: customer)
                _ = try engine.purchase(.init(customerId: customer, productId: "pro.monthly"))
                _ = try engine.purchase(.init(customerId: customer, productId: "coins.100"))
            }
        }
        return Set(await testbed.simulator.state.notifications.map(\.notificationUUID)).subtracting(before)
    }

    @Test(
        "the App Store's clock two days ahead: a dry run finds what was bought meanwhile, a run applies it, and the watermark follows the App Store's clock"
    )
    func appStoreClockAhead() async throws {
        let testbed = try await T(environment: .sandbox)
        try await testbed.withSimulator { simulatorURL in
            let fixture = try await Self.fixture(testbed, simulatorURL: simulatorURL)
            let (store, serverNow, recovery) = (fixture.store, fixture.serverNow, fixture.recovery)
            let first = try await recovery.run()
            #expect(first.complete && first.watermarkAfter == serverNow)

            // The App Store's clock moves two days on; the server's does not (its clock is behind, or it was down).
            _ = try await testbed.simulator.advance(by: 2 * 86_400) {}
            let missed = try await Self.purchasesWhileDown(testbed, customers: ["ann", "ben", "cal"])
            #expect(missed.count == 6)

            let dry = try await recovery.run(dryRun: true)
            #expect(dry.missingCount == missed.count, "\(dry)")
            #expect(dry.complete)
            #expect(abs((dry.appStoreClockAheadSeconds ?? 0) - 2 * 86_400) <= 120, "\(String(describing: dry.appStoreClockAheadSeconds))")
            #expect(try await store.notificationCounts()["applied"] == nil, "a dry run changes nothing")

            let real = try await recovery.run()
            #expect(real.complete && real.applied == missed.count, "\(real)")
            for uuid in missed { #expect(try await store.containsNotification(uuid)) }
            // The watermark is the server's now, behind the App Store's: the next run reads a little more, and misses nothing.
            #expect(try await store.recoveryWatermark(Self.app) == serverNow)
            let again = try await recovery.run()
            #expect(again.complete && again.applied == 0 && again.fetched == again.duplicates, "\(again)")
        }
    }

    @Test("a watermark older than the App Store's history: the run says which part is lost, its metric counts it incomplete, no success is recorded")
    func windowNotCovered() async throws {
        let testbed = try await T(environment: .sandbox)
        try await testbed.withSimulator { simulatorURL in
            let fixture = try await Self.fixture(testbed, simulatorURL: simulatorURL)
            let (store, serverNow, exporter, log, recovery) = (fixture.store, fixture.serverNow, fixture.exporter, fixture.log, fixture.recovery)
            #expect(try await recovery.run().complete)
            let watermark = try #require(try await store.recoveryWatermark(Self.app))
            let successBefore = exporter.render().split(separator: "\n").filter { $0.hasPrefix(StorekeeperMetrics.Name.recoveryLastSuccess + "{") }

            // Forty days pass at the App Store (sandbox keeps thirty): what it created in the first ten is gone.
            _ = try await testbed.simulator.advance(by: 40 * 86_400) {}
            let missed = try await Self.purchasesWhileDown(testbed, customers: ["dan"])
            await NotificationRecoveryService.runOnce(recovery, state: .init(), logger: log.logger())

            // The watermark moves on (what is gone cannot come back), to the App Store's now found by the refused start.
            let moved = try #require(try await store.recoveryWatermark(Self.app))
            #expect(abs(moved.timeIntervalSince(serverNow) - 40 * 86_400) <= 120, "\(moved) vs \(serverNow)")
            for uuid in missed { #expect(try await store.containsNotification(uuid), "what the App Store still holds is applied") }
            let metrics = exporter.render()
            #expect(
                metrics.contains(
                    #"storekeeper_recovery_runs_total{bundle_id="com.example.storekeeper",environment="Sandbox",outcome="incomplete"} 1"#),
                "\(metrics)")
            let successAfter = metrics.split(separator: "\n").filter { $0.hasPrefix(StorekeeperMetrics.Name.recoveryLastSuccess + "{") }
            #expect(successAfter == successBefore, "an incomplete run is not a success")
            let errors = log.all.filter { $0.level == .error }.map(\.line)
            #expect(errors.contains { $0.contains("could not cover its window") && $0.contains("recovery.uncovered_from=") }, "\(errors)")

            // The next runs start from that watermark, in the App Store's time: complete, every one (the App Store's
            // clock is measured again when the watermark is ahead of this server's, before the watermark moves).
            for _ in 0..<3 {
                let next = try await recovery.run()
                #expect(next.complete && next.uncovered == nil, "\(next)")
                #expect(abs((next.watermarkAfter ?? .distantPast).timeIntervalSince(serverNow) - 40 * 86_400) <= 120, "\(next)")
                // Its window is told in the App Store's time at both ends: it ends after it begins.
                #expect(next.from < next.to && abs(next.to.timeIntervalSince(serverNow) - 40 * 86_400) <= 120, "\(next)")
            }

            // The report names the lost part: from the old watermark (less the overlap) to the App Store's earliest.
            let report = try await recovery.run(since: watermark, dryRun: true)
            let lost = try #require(report.uncovered)
            #expect(!report.complete && lost.start == watermark)
            #expect(abs(lost.end.timeIntervalSince(watermark) - 10 * 86_400) <= 3_700, "\(lost)")
        }
    }

    /// An App Store whose clock is ten days ahead of the server's and moves two minutes on at every request (as a real
    /// one moves while a long history is paged through): it checks every request's start against its 30-day window,
    /// and answers three empty pages.
    final class MovingAppStore: Sendable {
        private let state = Mutex<(requests: Int, refusedAfterAPage: Int)>((0, 0))
        let start: Date
        init(serverNow: Date) { start = serverNow.addingTimeInterval(10 * 86_400) }
        var refusedAfterAPage: Int { state.withLock { $0.refusedAfterAPage } }

        func answer(_ request: Request) async throws -> Response {
            let bytes = try await request.body.collect(upTo: 1 << 16)
            let body = try JSONDecoder().decode(JSONValue.self, from: Data(bytes.readableBytesView))
            guard case .object(let fields) = body, case .integer(let startDate)? = fields["startDate"] else {
                return Response(status: .badRequest)
            }
            let token = request.uri.queryParameters.get("paginationToken")
            let now = state.withLock { state in
                state.requests += 1
                return start.addingTimeInterval(Double(state.requests) * 120)
            }
            func json(_ status: HTTPResponse.Status, _ text: String) -> Response {
                Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
            }
            if now.epochMilliseconds - startDate > 30 * 86_400_000 {
                if token != nil { state.withLock { $0.refusedAfterAPage += 1 } }
                return json(
                    .badRequest, #"{"errorCode": 4000012, "errorMessage": "Invalid request. The start date is earlier than the allowed start date."}"#
                )
            }
            let next = ["": "p1", "p1": "p2"][token ?? ""]
            return json(
                .ok,
                next.map { #"{"notificationHistory": [], "hasMore": true, "paginationToken": "\#($0)"}"# }
                    ?? #"{"notificationHistory": [], "hasMore": false}"#)
        }
    }

    @Test(
        "the App Store's clock ahead and moving while the pages are read: the run starts an hour inside the window it finds, so no later page is refused"
    )
    func windowMovesWhilePaging() async throws {
        let testbed = try await T(environment: .sandbox)
        let serverNow = await testbed.simulator.state.now
        let appStore = MovingAppStore(serverNow: serverNow)
        let router = Router()
        router.post("/inApps/v1/notifications/history") { request, _ in try await appStore.answer(request) }
        try await Application(router: router).test(.live) { client in
            let configuration = try testbed.configuration(baseURL: "http://127.0.0.1:\(client.port!)")
            let store = try SQLiteLedgerStore(path: testbed.database)
            let log = CapturedLog()
            let ingester = NotificationIngester(
                store: store, verifiers: try configuration.makeVerifiers(), configuration: configuration, logger: log.logger())
            let recovery = NotificationRecovery(
                app: Self.app, client: try #require(try configuration.makeServerAPIClients(logger: log.logger())[Self.app]), ingester: ingester,
                settings: configuration.recovery.settings, logger: log.logger(), now: { serverNow })
            // Before, the start found at the window's edge was refused on the next page (StartDateTooFarInPastError).
            let report = try await recovery.run()
            #expect(appStore.refusedAfterAPage == 0)
            #expect(report.pages == 6, "three pages of history, three of failed deliveries: \(report)")
            // The App Store's clock, found from the window's edge (its drift of two minutes a request aside).
            let ahead = try #require(report.appStoreClockAheadSeconds)
            #expect(ahead >= 10 * 86_400 && ahead < 10 * 86_400 + 7_200, "\(ahead)")
            await store.close()
        }
    }
}
