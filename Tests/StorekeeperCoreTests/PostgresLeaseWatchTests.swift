import Foundation
@testable import StorekeeperPostgres
import Synchronization
import Testing

/// The bound on an operation's wait for a pooled connection (``PostgresLeaseWatch``), without a database: the store's
/// own test of it against PostgreSQL is `PostgresTimeoutTests`.
@Suite("PostgreSQL store: the wait for a connection")
struct PostgresLeaseWatchTests {
    struct TimedOut: Error {}

    @Test("an operation still without a connection at its deadline is cancelled and fails with the timeout's error")
    func timesOut() async throws {
        let watch = PostgresLeaseWatch(timeout: .milliseconds(300))
        watch.start()
        defer { watch.stop() }
        let cancelled = Mutex(false)
        let started = ContinuousClock.now
        await #expect(throws: TimedOut.self) {
            try await watch.run({ _ in
                // A lease request that never gets a connection, as postgres-nio's while the database does not answer.
                do { try await Task.sleep(for: .seconds(600)) } catch { cancelled.withLock { $0 = true }; throw error }
            }, timedOut: { TimedOut() })
        }
        let waited = ContinuousClock.now - started
        #expect(cancelled.withLock { $0 })
        // Not its own 600 s: the deadline's (plus the sweeper's turn, which a loaded machine can delay by seconds).
        #expect(waited >= .milliseconds(300) && waited < .seconds(120), "\(waited)")
    }

    @Test("an operation that has its connection is never cancelled for time, however long it runs")
    func leasedIsNotCancelled() async throws {
        let watch = PostgresLeaseWatch(timeout: .milliseconds(100))
        watch.start()
        defer { watch.stop() }
        let value = try await watch.run({ lease in
            #expect(lease.leased())
            try await Task.sleep(for: .milliseconds(600)) // Past the deadline, with sweeps every 50 ms.
            return 42
        }, timedOut: { TimedOut() })
        #expect(value == 42)
    }

    @Test("an operation's own error is thrown as it is; cancelling the caller cancels the operation")
    func errorsAndCancellation() async throws {
        struct Refused: Error {}
        let watch = PostgresLeaseWatch(timeout: .seconds(10))
        watch.start()
        defer { watch.stop() }
        await #expect(throws: Refused.self) {
            try await watch.run({ _ in throw Refused() }, timedOut: { TimedOut() })
        }
        let caller = Task {
            try await watch.run({ _ in try await Task.sleep(for: .seconds(30)) }, timedOut: { TimedOut() })
        }
        try await Task.sleep(for: .milliseconds(50))
        caller.cancel()
        let started = ContinuousClock.now
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test("a sweep cancels only the operations past their deadline that still wait")
    func sweep() async throws {
        let watch = PostgresLeaseWatch(timeout: .seconds(3_600)) // No sweeper: sweeps are called by hand.
        let waiting = Task { try await watch.run({ _ in try await Task.sleep(for: .seconds(30)) }, timedOut: { TimedOut() }) }
        let leased = Task {
            try await watch.run({ lease in
                lease.leased()
                try await Task.sleep(for: .milliseconds(300))
                return ()
            }, timedOut: { TimedOut() })
        }
        try await Task.sleep(for: .milliseconds(100))
        watch.sweep(at: .now) // Before the deadline: nothing.
        try await Task.sleep(for: .milliseconds(50))
        watch.sweep(at: .now + .seconds(7_200)) // Past it: the waiting one only.
        await #expect(throws: TimedOut.self) { try await waiting.value }
        try await leased.value
    }
}
