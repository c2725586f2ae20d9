import ServiceLifecycle
import Synchronization

/// Tells long-polling readers that events may have been committed: a store signals after each of its write commits.
/// Another process's commits (a second PostgreSQL instance) are not signalled here; readers also look again at
/// least every ``recheckInterval``.
package final class EventSignal: Sendable {
    private let generation = Atomic<UInt64>(0)
    /// How often a waiter looks at the generation, and so the longest a signal can go unnoticed.
    static let step = Duration.milliseconds(25)
    /// How long a waiter goes without looking at the database at all.
    package static let recheckInterval = Duration.seconds(1)

    package init() {}

    package func signal() {
        generation.add(1, ordering: .releasing)
    }

    package var current: UInt64 { generation.load(ordering: .acquiring) }

    /// Returns when a signal came after `seen`, or `timeout` passed, or the task is cancelled.
    package func wait(after seen: UInt64, timeout: Duration) async {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        // A graceful shutdown ends the wait (a long poll answers its empty page instead of holding the stop).
        while current == seen, clock.now < deadline, !Task.isCancelled, !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: Self.step)
        }
    }
}
