package import AppStoreModels
import Synchronization

/// Keeps a client under Apple's per-endpoint rate limits (APPSTORE-SPEC §1.2): requests of each endpoint family
/// leave at least `1 / rate` apart, so no second ever holds more than the limit (sandbox: 10 %).
package actor RequestRateLimiter {
    /// An endpoint family with its own limit (the table both the client and the simulator use).
    package typealias Family = APIRateLimitFamily

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    /// The least time between two requests of a family; a family left out is not limited.
    private let intervals: [Family: Duration]
    private var waiting: [Family: [Waiter]] = [:]
    private var lastLetGo: [Family: ContinuousClock.Instant] = [:]
    private var pacing: Set<Family> = []
    private var lastWaiterID: UInt64 = 0
    /// Waiters whose task was cancelled, marked at once by the cancellation handler (which cannot wait for the
    /// actor): pacing never lets one of them go, even when the handler's withdrawal has not run yet.
    private nonisolated let cancelled = Mutex<Set<UInt64>>([])

    /// Apple's limits for production, or 10 % of them for sandbox; `scale` below 1 leaves headroom.
    package init(sandbox: Bool, scale: Double = 1) {
        var rates: [Family: Double] = [:]
        for family in Family.allCases { rates[family] = family.rate(sandbox: sandbox) * scale }
        self.init(rates: rates)
    }

    /// Custom rates per family (requests per second); a family left out is not limited.
    package init(rates: [Family: Double]) {
        intervals = rates.filter { $0.value > 0 }.mapValues { .nanoseconds(Int64((1_000_000_000 / $0).rounded(.up))) }
    }

    /// Waits until a request of `family` may be sent; throws `CancellationError` at once if the task is cancelled.
    ///
    /// Requests are let go one at a time, in the order they asked, each at least `1 / rate` after the moment the one
    /// before it was actually let go. No slot is reserved ahead: after a stall of the process (CPU starvation, a long
    /// pause) the requests that were waiting leave one interval apart, not all at once in a burst over Apple's limit.
    package func acquire(_ family: Family) async throws {
        guard let interval = intervals[family] else { return }
        try Task.checkCancellation()
        let now = ContinuousClock.now
        if waiting[family, default: []].isEmpty, lastLetGo[family].map({ $0 + interval <= now }) ?? true {
            lastLetGo[family] = now
            return
        }
        lastWaiterID += 1
        let id = lastWaiterID
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if Task.isCancelled { return continuation.resume(throwing: CancellationError()) }
                waiting[family, default: []].append(Waiter(id: id, continuation: continuation))
                if pacing.insert(family).inserted {
                    Task { await self.pace(family, interval: interval) }
                }
            }
        } onCancel: {
            cancelled.withLock { _ = $0.insert(id) }
            Task { await self.withdraw(id, family) }
        }
    }

    /// Lets the waiters of `family` go, one per interval, until none is left.
    private func pace(_ family: Family, interval: Duration) async {
        while waiting[family]?.isEmpty == false {
            if let last = lastLetGo[family], last + interval > .now {
                try? await Task.sleep(until: last + interval, clock: .continuous)
                continue
            }
            let waiter = waiting[family]!.removeFirst()
            if cancelled.withLock({ $0.remove(waiter.id) != nil }) {
                waiter.continuation.resume(throwing: CancellationError())
                continue
            }
            lastLetGo[family] = .now
            waiter.continuation.resume()
        }
        pacing.remove(family)
    }

    private func withdraw(_ id: UInt64, _ family: Family) {
        cancelled.withLock { _ = $0.remove(id) }
        guard let index = waiting[family]?.firstIndex(where: { $0.id == id }) else { return }
        waiting[family]!.remove(at: index).continuation.resume(throwing: CancellationError())
    }
}
