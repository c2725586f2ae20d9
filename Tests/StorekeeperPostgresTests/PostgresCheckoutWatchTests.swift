import Foundation
import StorekeeperTesting
import Synchronization
import Testing

@testable import StorekeeperPostgres

/// The bound on an operation's wait for a pooled connection (``PostgresCheckoutWatch``), without a database: the store's
/// own test of it against PostgreSQL is `PostgresTimeoutTests`.
@Suite("PostgreSQL store: the wait for a connection")
struct PostgresCheckoutWatchTests {
    struct TimedOut: Error {}

    @Test("an operation still without a connection at its deadline is cancelled and fails with the timeout's error")
    func timesOut() async throws {
        let watch = PostgresCheckoutWatch(timeout: .milliseconds(300))
        watch.start()
        defer { watch.stop() }
        let cancelled = Mutex(false)
        let started = ContinuousClock.now
        await #expect(throws: TimedOut.self) {
            try await watch.run(
                { _ in
                    // A checkout request that never gets a connection, as postgres-nio's while the database does not answer.
                    do { try await Task.sleep(for: .seconds(600)) } catch {
                        cancelled.withLock { $0 = true }
                        throw error
                    }
                }, timedOut: { TimedOut() })
        }
        let waited = ContinuousClock.now - started
        #expect(cancelled.withLock { $0 })
        // Not its own 600 s: the deadline's (plus the sweeper's turn, which a loaded machine can delay by seconds).
        #expect(waited >= .milliseconds(300) && waited < .seconds(120), "\(waited)")
    }

    @Test("an operation's own error is thrown as it is; cancelling the caller cancels the operation")
    func errorsAndCancellation() async throws {
        struct Refused: Error {}
        let watch = PostgresCheckoutWatch(timeout: .seconds(10))
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
        // Well before the timeout (10 s) and the operation's own end (30 s), with room for a loaded machine (2 s was
        // exceeded once with the whole suite and a CI build side by side).
        #expect(ContinuousClock.now - started < .seconds(8))
    }

    /// Sweeps far past every deadline, by hand, until `done` (at most 10 s).
    static func sweepUntilDone(_ watch: PostgresCheckoutWatch, done: borrowing Mutex<Bool>) async throws {
        let until = ContinuousClock.now + .seconds(10)
        while !done.withLock({ $0 }), ContinuousClock.now < until {
            watch.sweep(at: .now + .seconds(7_200))
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test(
        "a sweep cancels an operation past its deadline that still waits, never one that has said it has its connection; one that gets it too late is told so"
    )
    func sweep() async throws {
        let watch = PostgresCheckoutWatch(timeout: .seconds(3_600))  // No sweeper: sweeps are called by hand.
        let (started, signal) = AsyncStream.makeStream(of: Void.self)
        let release = Mutex(false), waitingDone = Mutex(false), lateDone = Mutex(false)
        let checkedOut = Task {
            try await watch.run(
                { checkout in
                    #expect(checkout.checkedOut())
                    signal.yield()
                    // Swept many times past its deadline while it runs: never cancelled.
                    while !release.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
                    return 42
                }, timedOut: { TimedOut() })
        }
        for await _ in started { break }
        watch.sweep(at: .now)  // Before every deadline: nothing.
        let waiting = Task {
            defer { waitingDone.withLock { $0 = true } }
            try await watch.run({ _ in try await Task.sleep(for: .seconds(600)) }, timedOut: { TimedOut() })
        }
        try await Self.sweepUntilDone(watch, done: waitingDone)
        await #expect(throws: TimedOut.self) { try await waiting.value }
        let late = Task {
            defer { lateDone.withLock { $0 = true } }
            try await watch.run(
                { checkout in
                    // The connection comes after the sweep that timed it out: `checkedOut()` says so.
                    while !Task.isCancelled { await Task.yield() }
                    #expect(!checkout.checkedOut())
                    throw CancellationError()
                }, timedOut: { TimedOut() })
        }
        try await Self.sweepUntilDone(watch, done: lateDone)
        await #expect(throws: TimedOut.self) { try await late.value }
        release.withLock { $0 = true }
        #expect(try await checkedOut.value == 42)
    }
}
