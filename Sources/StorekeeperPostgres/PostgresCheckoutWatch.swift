import StorekeeperCore
import Synchronization

/// Bounds how long the store's operations wait for a pooled connection (`connect_timeout`), with one sweeper for all
/// of them instead of a timer each.
///
/// postgres-nio keeps a checkout request (postgres-nio calls it a lease) waiting while the pool has no connection to give: every connection busy, or the
/// database not answering while the pool tries to connect again (unbounded, a request would wait until the HTTP
/// server's timeout). A timer per operation (a `Task.sleep` raced in a task group) would arm and cancel a timer, and
/// start and wait for a task more, on every read and write: a cost on the path of every request (Benchmarks/History.md,
/// eighth round). So an operation runs in a task of its own, registered here with its deadline; the sweeper wakes
/// every tenth of the timeout (at least 50 ms, at most a second) and cancels every operation whose deadline has
/// passed while it still had no connection, which fails its checkout request. An operation that has said it has its
/// connection (``Checkout/checkedOut()``) is never cancelled for time (how long a statement may run is `statement_timeout`'s
/// business); one that gets its connection just after its deadline's sweep is told so by ``Checkout/checkedOut()``'s answer
/// and must give it back unused.
final class PostgresCheckoutWatch: Sendable {
    /// One operation's checkout: waiting for a connection until it has one (``checkedOut()``) or its deadline passes.
    final class Checkout: Sendable {
        fileprivate enum State { case waiting, checkedOut, timedOut, done }
        fileprivate let state = Mutex(State.waiting)
        fileprivate let deadline: ContinuousClock.Instant
        fileprivate let cancel: Mutex<(@Sendable () -> Void)?> = Mutex(nil)

        fileprivate init(deadline: ContinuousClock.Instant) {
            self.deadline = deadline
        }

        /// Says the operation has its connection: from now on it is not cancelled for time. `false` when it timed
        /// out first (its task is being cancelled): the operation must then not use the connection, and should throw.
        func checkedOut() -> Bool {
            state.withLock { state in
                guard state == .waiting else { return false }
                state = .checkedOut
                return true
            }
        }

        /// Ends the checkout when its operation has ended: whether it had timed out. An operation that failed for a
        /// reason of its own near its deadline, without a connection, keeps its own error: a sweep after this call
        /// leaves it alone.
        fileprivate func finish() -> Bool {
            state.withLock { state in
                if state == .timedOut { return true }
                state = .done
                return false
            }
        }
    }

    private struct Registry: ~Copyable {
        var next = 0
        var checkouts: [Int: Checkout] = [:]
    }

    let timeout: Duration
    private let registry = Mutex(Registry())
    private let sweeper = Mutex<Task<Void, Never>?>(nil)

    init(timeout: Duration) {
        self.timeout = timeout
    }

    /// Starts the sweeper; ``stop()`` ends it.
    func start() {
        let period = max(.milliseconds(50), min(.seconds(1), timeout / 10))
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: period)
                guard let self else { return }
                self.sweep(at: .now)
            }
        }
        sweeper.withLock { $0 = task }
    }

    func stop() {
        sweeper.withLock {
            $0?.cancel()
            $0 = nil
        }
    }

    /// Runs `operation` in a task of its own, cancelled if it has no connection (``Checkout/checkedOut()``) within
    /// ``timeout`` (of the arrival of the oldest request of the batch it runs for, ``BatchArrival``, if any: a request
    /// waits that long in all); then throws `timedOut()`'s error instead of the cancellation's. Cancelling the caller
    /// cancels it.
    func run<T: Sendable>(
        _ operation: @escaping @Sendable (Checkout) async throws -> T,
        timedOut: () -> any Error
    ) async throws -> T {
        let checkout = Checkout(deadline: (BatchArrival.oldest ?? .now) + timeout)
        let task = Task { try await operation(checkout) }
        checkout.cancel.withLock { $0 = { task.cancel() } }
        let id = registry.withLock { registry in
            registry.next &+= 1
            registry.checkouts[registry.next] = checkout
            return registry.next
        }
        defer { _ = registry.withLock { $0.checkouts.removeValue(forKey: id) } }
        do {
            let value = try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
            _ = checkout.finish()
            return value
        } catch {
            if checkout.finish() { throw timedOut() }
            throw error
        }
    }

    /// Cancels the operations still waiting for a connection at `now` past their deadline.
    func sweep(at now: ContinuousClock.Instant) {
        let expired = registry.withLock { registry in registry.checkouts.values.filter { $0.deadline <= now } }
        for checkout in expired {
            let timedOut = checkout.state.withLock { state in
                guard state == .waiting else { return false }
                state = .timedOut
                return true
            }
            if timedOut { checkout.cancel.withLock { $0 }?() }
        }
    }
}
