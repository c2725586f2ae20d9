import AppStoreModels
import AppStoreSigning
import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: scenarios")
struct ScenarioTests {
    typealias H = SimulatorFixture

    /// Plays a shipped scenario on a fresh simulator; returns the verified notification summaries.
    static func play(_ name: String, environment: AppStoreEnvironment = .sandbox) async throws -> [String] {
        var harness = H(environment: environment)
        let simulator = Simulator(engine: harness.engine)
        let scenario = try #require(try ShippedScenarios.named(name))
        try await ScenarioRunner(simulator: simulator).run(scenario)
        harness.engine = await simulator.engine
        return try await harness.newSummaries()
    }

    @Test("every shipped scenario plays to the end with its expectations met", arguments: ShippedScenarios.all.map(\.name))
    func shipped(name: String) async throws {
        let summaries = try await Self.play(name)
        #expect(!summaries.isEmpty)
    }

    @Test("the subscriber lifecycle sends exactly Apple's sequence")
    func subscriberSequence() async throws {
        #expect(
            try await Self.play("subscriber-lifecycle") == [
                "SUBSCRIBED/INITIAL_BUY 1", "DID_RENEW 1", "DID_FAIL_TO_RENEW/GRACE_PERIOD 4", "DID_RENEW/BILLING_RECOVERY 1",
                "DID_CHANGE_RENEWAL_PREF/UPGRADE 1", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED 1", "EXPIRED/VOLUNTARY 2",
            ])
    }

    @Test("billing retry, grace expiry, refunds and family sharing send Apple's sequences")
    func otherSequences() async throws {
        let retry = try await Self.play("billing-retry")
        #expect(
            Array(retry.prefix(5)) == [
                "SUBSCRIBED/INITIAL_BUY 1", "SUBSCRIBED/INITIAL_BUY 1", "DID_FAIL_TO_RENEW 3", "DID_FAIL_TO_RENEW 3",
                "DID_RENEW/BILLING_RECOVERY 1",
            ])
        // Dana renews weekly afterwards; Bob's billing retry ends 60 days after his failed renewal.
        #expect(retry.dropFirst(5).filter { $0 != "DID_RENEW 1" } == ["EXPIRED/BILLING_RETRY 2"])
        #expect(retry.filter { $0 == "DID_RENEW 1" }.count == 8)
        #expect(
            try await Self.play("grace-period-expiry") == [
                "SUBSCRIBED/INITIAL_BUY 1", "DID_FAIL_TO_RENEW/GRACE_PERIOD 4", "GRACE_PERIOD_EXPIRED 3", "EXPIRED/BILLING_RETRY 2",
            ])
        #expect(
            try await Self.play("refunds") == [
                "ONE_TIME_CHARGE", "ONE_TIME_CHARGE", "CONSUMPTION_REQUEST", "REFUND_DECLINED", "REFUND",
                "SUBSCRIBED/INITIAL_BUY 1", "REFUND 5", "REFUND_REVERSED 1",
            ])
        #expect(
            try await Self.play("family-sharing") == [
                "SUBSCRIBED/INITIAL_BUY 1", "SUBSCRIBED/INITIAL_BUY 1", "SUBSCRIBED/INITIAL_BUY 1",
                "ONE_TIME_CHARGE", "ONE_TIME_CHARGE", "ONE_TIME_CHARGE",
                "DID_RENEW 1", "DID_RENEW 1", "DID_RENEW 1", "REVOKE 5", "REVOKE", "REFUND 5", "REVOKE 5",
            ])
    }

    @Test("a bad scenario fails with the line and the reason, and a failed expectation names both sides")
    func errors() async throws {
        for (text, fragment) in [
            ("customer a\nfly a", "x:2: unknown step 'fly'"),
            ("buy a", "x:1: 'buy' takes 2 arguments, got 1"),
            ("", "x: the scenario has no steps"),
        ] {
            let error = #expect(throws: SimulatorError.self) { try Scenario(name: "x", text: text) }
            #expect(error?.message.contains(fragment) == true, "\(error?.message ?? "")")
        }
        let simulator = Simulator(engine: H().engine)
        let scenario = try Scenario(name: "y", text: "customer a\nbuy a pro.monthly\nexpect a premium.monthly")
        do {
            try await ScenarioRunner(simulator: simulator).run(scenario)
            Issue.record("a failed expectation passed")
        } catch {
            #expect(error.message == "y:3: expect: expected a to have [premium.monthly], has [pro.monthly]")
        }
        // A duration is decimal: `Double` alone would read 0x10 as 16, and inf and nan too.
        for duration in ["0x10d", "1e3d", "infd", "nand", "-1d", "d", "1.5"] {
            let refused = await #expect(throws: SimulatorError.self) {
                try await ScenarioRunner(simulator: simulator).run(try Scenario(name: "z", text: "advance \(duration)"))
            }
            #expect(refused?.message.contains("is not a duration") == true, "\(duration): \(refused?.message ?? "")")
        }
        #expect(Scenario.duration("1.5d") == 129_600 && Scenario.duration("90s") == 90)
    }
}
