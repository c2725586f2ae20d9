import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import Crypto
import Foundation
import Logging
import StorekeeperTesting
import Testing

@Suite("API client: retries, Retry-After, rate limits, secrets")
struct ClientResilienceTests {
    typealias L = LiveSimulator

    @Test("5xx with Apple's retryable code is retried until it succeeds")
    func retriesServerErrors() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        try await live.setFaults { $0.failNextAPIRequests = 3 }
        try await live.serve { url in
            let info = try await live.client(url).transactionInfo("2000000000000001")
            #expect(!info.signedTransactionInfo.isEmpty)
        }
        #expect(await live.simulator.state.faults.failNextAPIRequests == 0)
    }

    @Test("retries stop at the attempt limit, reporting the last error and the attempts")
    func attemptLimit() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        try await live.setFaults { $0.failNextAPIRequests = 10 }
        try await live.serve { url in
            let client = live.client(
                url, retry: RetryPolicy(maximumAttempts: 3, initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(50)))
            let error = await #expect(throws: AppStoreServerAPIError.self) { try await client.transactionInfo("2000000000000001") }
            #expect(error?.attempts == 3)
            #expect(error?.errorCode == 5_000_001 && error?.httpStatus == 500)
            #expect(error?.description.contains("after 3 attempts") == true)
        }
        #expect(await live.simulator.state.faults.failNextAPIRequests == 7)
    }

    @Test("429 is retried after the Retry-After time (a UNIX time in milliseconds)")
    func retryAfterHonoured() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        try await live.setFaults { $0.rateLimitNextAPIRequests = 1 }
        try await live.serve { url in
            let client = live.client(url, retry: RetryPolicy(initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(1)))
            let started = Date()
            _ = try await client.transactionInfo("2000000000000001")
            // The injected 429's Retry-After is 1-2 s away (the start of the second after next); the backoff alone
            // would be 1 ms.
            let retryAfter = started.timeIntervalSince1970.rounded(.down) + 2
            #expect(Date().timeIntervalSince1970 >= retryAfter - 0.01)
            #expect(Date().timeIntervalSince(started) >= 0.99)
        }
    }

    @Test("a Retry-After beyond the deadline ends the call at once with the 429")
    func retryAfterBeyondDeadline() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        // Retry-After a minute away, a deadline of 15 s: far enough apart that a loaded machine (the whole suite in
        // parallel) cannot make the first answer itself outlast the deadline.
        try await live.setFaults {
            $0.rateLimitNextAPIRequests = 5
            $0.rateLimitRetryAfterSeconds = 60
        }
        try await live.serve { url in
            let client = live.client(url, retry: RetryPolicy(maximumAttempts: 5, deadline: .seconds(15)))
            let started = ContinuousClock.now
            let error = await #expect(throws: AppStoreServerAPIError.self) { try await client.transactionInfo("2000000000000001") }
            #expect(error?.errorCode == 4_290_000 && error?.httpStatus == 429, "\(error.map { "\($0)" } ?? "no error")")
            #expect(error?.message.contains("deadline") == true)
            // At once: no wait for the Retry-After, nor for the deadline.
            #expect(ContinuousClock.now - started < .seconds(15))
        }
    }

    @Test("timeouts are retried; when every attempt times out the error says transport")
    func timeouts() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        try await live.setFaults { $0.apiLatencyMilliseconds = 600 }
        try await live.serve { url in
            let client = live.client(
                url,
                retry: RetryPolicy(maximumAttempts: 2, initialBackoff: .milliseconds(10), deadline: .seconds(5), attemptTimeout: .milliseconds(150)))
            let error = await #expect(throws: AppStoreServerAPIError.self) { try await client.transactionInfo("2000000000000001") }
            #expect(error?.kind == .transport)
            #expect(error?.attempts == 2)
            try await live.setFaults { $0.apiLatencyMilliseconds = 0 }
            // Without the latency the simulator answers (with the default per-attempt timeout: a loaded machine
            // can take longer than 150 ms to answer even a quick request).
            _ = try await live.client(url).transactionInfo("2000000000000001")
        }
    }

    @Test("Retry-After values: UNIX milliseconds, UNIX seconds, or seconds to wait")
    func retryAfterParsing() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(RetryPolicy.retryAfter("1800000005000", now: now) == Date(timeIntervalSince1970: 1_800_000_005))
        #expect(RetryPolicy.retryAfter("1800000007", now: now) == Date(timeIntervalSince1970: 1_800_000_007))
        #expect(RetryPolicy.retryAfter("30", now: now) == now.addingTimeInterval(30))
        #expect(RetryPolicy.retryAfter("soon", now: now) == nil)
    }

    @Test("the rate limiter keeps a burst of 500 history calls under Apple's limit: not one 429")
    func burstUnderLimit() async throws {
        let live = try L(environment: .production, setUp: SimulatorFixture.aliceSubscribes)
        try await live.setFaults { $0.rateLimitsEnabled = true }
        try await live.serve { url in
            // No retries: a single 429 would fail the call.
            let client = live.client(url, retry: .none, rateLimiting: .apple)
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<500 {
                    group.addTask {
                        try await client.transactionHistory("2000000000000001").all().count
                    }
                }
                var calls = 0
                for try await pages in group { calls += pages }
                #expect(calls == 500)
            }
        }
    }

    /// In the sandbox, whose limit is a tenth of production's: a whole-suite run on a loaded machine once made these
    /// calls at 13/s, under production's limit, and none was refused.
    @Test("without the limiter, the same burst does hit Apple's limit (so the test above can fail)")
    func burstWithoutLimiter() async throws {
        let live = try L(environment: .sandbox, setUp: SimulatorFixture.aliceSubscribes)
        try await live.setFaults { $0.rateLimitsEnabled = true }
        try await live.serve { url in
            let client = live.client(url, retry: .none, rateLimiting: .disabled)
            // On a machine busy enough that a burst's calls come slower than the sandbox's 5 a second, none is refused:
            // up to three bursts, until one is.
            var limited = 0
            for _ in 0..<3 where limited == 0 {
                limited = await Self.burst(client)
            }
            #expect(limited > 0)
        }
    }

    /// 500 history calls at once; how many the App Store refused with 429.
    static func burst(_ client: AppStoreServerAPIClient) async -> Int {
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<500 {
                group.addTask {
                    do throws(AppStoreServerAPIError) {
                        _ = try await client.transactionHistory("2000000000000001").all()
                        return false
                    } catch {
                        return error.errorCode == 4_290_000
                    }
                }
            }
            var count = 0
            for await wasLimited in group where wasLimited { count += 1 }
            return count
        }
    }

    @Test("tokens and keys never appear in logs or errors")
    func secrets() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        let handler = CollectingLogHandler()
        try await live.setFaults { $0.failNextAPIRequests = 2 }
        try await live.serve { url in
            let logger = Logger(label: "secrets") { _ in handler }
            let client = live.client(url, logger: logger)
            _ = try await client.transactionInfo("2000000000000001")
            let notFound = await #expect(throws: AppStoreServerAPIError.self) { try await client.transactionInfo("42") }
            let wrongKey = AppStoreServerAPIClient(
                configuration: .init(
                    key: AppStoreAPIKey(
                        issuerID: TestAppStore.apiKeyInfo.issuerId, keyID: "OTHERKEY", bundleID: TestAppStore.bundleID, privateKey: .init()),
                    endpoint: .custom(baseURL: url, environment: .sandbox)
                ), logger: logger)
            let unauthorized = await #expect(throws: AppStoreServerAPIError.self) { try await wrongKey.transactionInfo("2000000000000001") }
            #expect(unauthorized?.kind == .unauthorized)
            let token = try APIAuthToken.make(
                key: AppStoreAPIKey(
                    issuerID: TestAppStore.apiKeyInfo.issuerId, keyID: TestAppStore.apiKeyInfo.keyId, bundleID: TestAppStore.bundleID,
                    privateKey: TestAppStore.apiPrivateKey))
            let tokenHeader = String(token.split(separator: ".")[0])
            let keyText = TestAppStore.apiPrivateKey.pemRepresentation.split(separator: "\n")[1]
            let texts = handler.all + [notFound.map(String.init(describing:)) ?? "", unauthorized.map(String.init(describing:)) ?? ""]
            #expect(handler.all.contains { $0.contains("retried") })
            for text in texts {
                #expect(!text.contains(tokenHeader), "a token leaked: \(text)")
                #expect(!text.contains("Bearer"), "an Authorization header leaked: \(text)")
                #expect(!text.contains(keyText.prefix(20)), "key material leaked: \(text)")
            }
        }
    }
}
