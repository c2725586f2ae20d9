import AppStoreModels
import AppStoreServerAPI
import Foundation
import StorekeeperTesting
import Testing

@Suite("API client: the request rate limiter")
struct RequestRateLimiterTests {
    /// Blocks every thread of Swift's cooperative pool for `duration`, as a starved or paused process would.
    static func stallCooperativePool(for duration: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<ProcessInfo.processInfo.activeProcessorCount {
                group.addTask { usleep(UInt32(duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000)) }
            }
        }
    }

    @Test("after the process stalls, the waiting requests leave one interval apart, not in a burst")
    func noBurstAfterStall() async throws {
        // 50 requests per second: at most 5 in any 100 ms (6 across a window's edges).
        let limiter = RequestRateLimiter(rates: [.general: 50])
        let times = try await withThrowingTaskGroup(of: ContinuousClock.Instant?.self) { group in
            for _ in 0..<40 {
                group.addTask {
                    try await limiter.acquire(.general)
                    return ContinuousClock.now
                }
            }
            group.addTask {
                try await Task.sleep(for: .milliseconds(100))
                await Self.stallCooperativePool(for: .milliseconds(300))
                return nil
            }
            return try await group.reduce(into: []) { times, time in time.map { times.append($0) } }.sorted()
        }
        #expect(times.count == 40)
        var busiest = 0
        for (index, start) in times.enumerated() {
            busiest = max(busiest, times[index...].prefix { $0 < start + .milliseconds(100) }.count)
        }
        // Slots reserved ahead (the first design) let about 15 go at once after a 300 ms stall.
        #expect(busiest <= 7, "\(busiest) requests left within 100 ms")
        #expect(times.last! - times.first! >= .milliseconds(39 * 20 - 20))
    }

    @Test("a cancelled waiter stops waiting at once, with CancellationError")
    func cancellation() async throws {
        // One request every 10 minutes: a waiter that did not stop at its cancellation would wait that long. The
        // bound is wide, so that a machine stalled for a while (the whole suite runs in parallel) cannot fail it.
        let limiter = RequestRateLimiter(rates: [.general: 1.0 / 600])
        try await limiter.acquire(.general)
        let clock = ContinuousClock()
        let waiter = Task { try await limiter.acquire(.general) }
        try await Task.sleep(for: .milliseconds(200))
        let cancelled = clock.now
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(clock.now - cancelled < .seconds(120))
    }

    @Test("a family left out of the rates is not limited; an unlimited burst passes at once")
    func unlimitedFamily() async throws {
        let limiter = RequestRateLimiter(rates: [.massAndTest: 0.1])
        let clock = ContinuousClock()
        let started = clock.now
        for _ in 0..<200 { try await limiter.acquire(.general) }
        try await limiter.acquire(.massAndTest)
        #expect(clock.now - started < .seconds(5))
    }
}
