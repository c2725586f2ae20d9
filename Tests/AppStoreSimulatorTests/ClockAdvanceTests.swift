import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

/// A clock advance plays every due time in order: each renewal, delivery and retry happens, and is recorded, at its
/// own virtual time (as Get Notification History shows), whether the clock moves through the control API, a
/// scenario or the running clock.
@Suite("Simulator: deliveries and retries at their own time during a clock advance")
struct ClockAdvanceTests {
    typealias H = SimulatorFixture

    /// An item of Get Notification History: the notification, verified, and its attempts.
    struct HistoryItem {
        var type: NotificationType
        var signedDate: Date
        var attempts: [(date: Date, result: String)]
    }

    /// Every notification in the history (all pages), oldest first.
    static func history(
        _ client: some TestClientProtocol, _ testbed: APITestbed, from start: Date = TestAppStore.start, until end: Date
    ) async throws -> [HistoryItem] {
        var items: [HistoryItem] = []
        var token: String? = nil
        repeat {
            let path = "/inApps/v1/notifications/history" + (token.map { "?paginationToken=\($0)" } ?? "")
            let body = #"{"startDate":\#(start.epochMilliseconds),"endDate":\#(end.epochMilliseconds + 1)}"#
            let page = try await client.call(.post, path, body: body)
            #expect(page.status == 200)
            let response = try AppStoreJSON.makeDecoder().decode(NotificationHistoryResponse.self, from: Data(page.text.utf8))
            for item in response.notificationHistory {
                let payload = try await testbed.harness.verifier.verifyNotification(item.signedPayload).payload
                items.append(
                    HistoryItem(
                        type: payload.notificationType, signedDate: payload.signedDate!,
                        attempts: (item.sendAttempts ?? []).map { ($0.attemptDate!, $0.sendAttemptResult!.rawValue) }
                    ))
            }
            token = response.paginationToken
        } while token != nil
        return items
    }

    /// Hours after `start`, for readable expectations.
    static func hours(_ dates: [Date], after start: Date) -> [Double] {
        dates.map { $0.timeIntervalSince(start) / 3600 }
    }

    @Test(
        "production: a receiver down through a 7-day advance is tried at +0, 1, 13, 37, 85 and 157 h; once up, each renewal is delivered when it happens"
    )
    func productionRetriesDuringAnAdvance() async throws {
        let receiver = Receiver()
        await receiver.set(.serviceUnavailable)
        let testbed = try APITestbed(environment: .production) { engine in try engine.createCustomer(id: "alice") }
        let deliverer = NotificationDeliverer(simulator: testbed.simulator, logger: Logger(label: "test"))
        let app = Application(router: SimulatorApplication.buildRouter(simulator: testbed.simulator, onChange: { await deliverer.deliverDue() }))
        try await receiver.serve { url in
            try await app.test(.router) { client in
                #expect(try await client.call(.put, "/simulator/v1/config", body: #"{"notificationURL":"\#(url)"}"#).status == 200)
                #expect(
                    try await client.call(.post, "/simulator/v1/purchases", body: #"{"customerId":"alice","productId":"pro.monthly"}"#).status == 200)
                let advanced = try await client.call(.post, "/simulator/v1/clock/advance", body: #"{"days":7}"#)
                #expect(advanced.status == 200)
                let week = TestAppStore.start.addingTimeInterval(7 * 86_400)
                let subscribed = try #require(try await Self.history(client, testbed, until: week).first)
                #expect(subscribed.type == .subscribed)
                #expect(subscribed.signedDate == TestAppStore.start)
                // Exactly Apple's schedule on the virtual clock: 1, 12, 24, 48 and 72 hours after each failure.
                #expect(Self.hours(subscribed.attempts.map(\.date), after: TestAppStore.start) == [0, 1, 13, 37, 85, 157])
                #expect(subscribed.attempts.allSatisfy { $0.result == "UNSUCCESSFUL_HTTP_RESPONSE_CODE" })

                // The receiver is back: two monthly renewals during a 62-day advance, each delivered at once.
                await receiver.set(.ok)
                #expect(try await client.call(.post, "/simulator/v1/clock/advance", body: #"{"days":62}"#).status == 200)
                let renewals = try await Self.history(client, testbed, until: week.addingTimeInterval(62 * 86_400))
                    .filter { $0.type == .didRenew }
                #expect(renewals.count == 2)
                for renewal in renewals {
                    #expect(renewal.attempts.map(\.date) == [renewal.signedDate])
                    #expect(renewal.attempts.map(\.result) == ["SUCCESS"])
                }
                #expect(renewals.map(\.signedDate) == [Date(timeIntervalSince1970: 1_782_678_400), Date(timeIntervalSince1970: 1_785_270_400)])
            }
        }
        #expect(await receiver.received.count == 6 + 2)
    }

    @Test("sandbox: one attempt at creation; a scenario's advance delivers each renewal at its own time")
    func sandboxAttemptsDuringAScenarioAdvance() async throws {
        let receiver = Receiver()
        await receiver.set(.internalServerError)
        let testbed = try APITestbed { engine in try engine.createCustomer(id: "alice") }
        let simulator = testbed.simulator
        let deliverer = NotificationDeliverer(simulator: simulator, logger: Logger(label: "test"))
        let runner = ScenarioRunner(simulator: simulator, afterStep: { await deliverer.deliverDue() })
        let app = Application(router: SimulatorApplication.buildRouter(simulator: simulator))
        let week = TestAppStore.start.addingTimeInterval(7 * 86_400)
        try await receiver.serve { url in
            _ = try await simulator.perform { engine in engine.setNotificationURL(url) }
            try await runner.run(Scenario(name: "down", text: "buy alice pro.monthly\nadvance 7d"))
            try await app.test(.router) { client in
                let items = try await Self.history(client, testbed, until: week)
                #expect(items.map(\.type) == [.subscribed])
                // Sandbox sends once, at creation, and does not retry.
                #expect(items.first?.attempts.map(\.date) == [TestAppStore.start])
                #expect(items.first?.attempts.map(\.result) == ["UNSUCCESSFUL_HTTP_RESPONSE_CODE"])
            }
            await receiver.set(.ok)
            try await runner.run(Scenario(name: "up", text: "advance 29d"))
        }
        try await app.test(.router) { client in
            let items = try await Self.history(client, testbed, from: week, until: week.addingTimeInterval(29 * 86_400))
            #expect(items.map(\.type) == [.didRenew])
            // The renewal on 2026-06-28 went out then, not when the 29-day advance ended.
            #expect(items.first?.signedDate == Date(timeIntervalSince1970: 1_782_678_400))
            #expect(items.first?.attempts.map(\.date) == items.first.map { [$0.signedDate] })
            #expect(items.first?.attempts.map(\.result) == ["SUCCESS"])
        }
    }

    /// The stops of concurrent advances, in the order they were delivered at.
    actor Stops {
        var seen: [(advance: String, at: Date)] = []
        func note(_ advance: String, _ simulator: Simulator) async { seen.append((advance, await simulator.now)) }
    }

    @Test(
        "an advance past year 9999 or of more than 100 years is refused before anything is played, however it is asked (it crashed the simulator)"
    )
    func advanceBounds() async throws {
        let testbed = try APITestbed { engine in try engine.createCustomer(id: "alice") }
        let simulator = testbed.simulator
        let runner = ScenarioRunner(simulator: simulator)
        try await runner.run(Scenario(name: "buy", text: "buy alice pro.monthly"))
        for text in ["advance 99999999999999999999d", "advance 36526d", "advance-to 10000-01-01T00:00:00Z"] {
            let error = await #expect(throws: SimulatorError.self) { try await runner.run(Scenario(name: "far", text: text)) }
            #expect(
                error?.message.contains("100 years") == true || error?.message.contains("year 10000") == true, "\(text): \(String(describing: error))"
            )
        }
        // 100 years is 100 years whether it is written as days or as a date in milliseconds.
        let now = TestAppStore.start
        try LifecycleEngine.checkAdvance(from: now, to: Date(timeIntervalSince1970: (now.timeIntervalSince1970 * 1000 + 3_155_760_000_000) / 1000))
        #expect(throws: SimulatorError.self) {
            try LifecycleEngine.checkAdvance(from: now, to: now.addingTimeInterval(LifecycleEngine.longestAdvance + 1))
        }
        var engine = testbed.harness.engine
        #expect(throws: SimulatorError.self) { try engine.advance(by: 1e300) }
        #expect(throws: SimulatorError.self) { try engine.advance(to: Date(timeIntervalSince1970: 1e300)) }
        // Nothing was played by the refused advances; the clock still moves as asked.
        let before = try await simulator.read { $0.state.now }
        try await simulator.advance(by: 86_400) {}
        #expect(try await simulator.read { $0.state.now } == before.addingTimeInterval(86_400))
    }

    @Test("advances run one at a time: their stops never interleave and the clock never goes back")
    func concurrentAdvances() async throws {
        let testbed = try APITestbed { engine in
            try engine.createCustomer(id: "alice")
            _ = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
            _ = try engine.purchase(.init(customerId: "alice", productId: "news.weekly"))
        }
        let simulator = testbed.simulator
        let stops = Stops()
        async let long: Void = try simulator.advance(by: 40 * 86_400) { await stops.note("long", simulator) }
        async let short: Void = try simulator.advance(by: 20 * 86_400) { await stops.note("short", simulator) }
        _ = try await (long, short)
        let seen = await stops.seen
        let order = seen.map(\.advance)
        #expect(order.count > 4)
        #expect(Set(order.prefix { $0 == order[0] }).count == 1 && Set(order.drop { $0 == order[0] }).count == 1)
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.at <= $1.at })
        await #expect(throws: SimulatorError.self) { try await simulator.advance(to: TestAppStore.start) {} }
    }
}
