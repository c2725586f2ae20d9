import DequeModule
import Logging
import PostgresNIO
import Synchronization

/// The store's connections, on a postgres-nio client that they keep checked out while they are in use, and that is renewed
/// when the database comes back after an outage.
///
/// **Connections kept while busy.** Every time a connection goes back to postgres-nio's pool, the pool arms an idle
/// timer (60 s) and a keep-alive timer (30 s), each a task sleeping its whole duration; the next checkout cancels them,
/// but a cancelled `Task.sleep` keeps its memory until its original deadline, so a checkout per operation, at thousands
/// of operations a second, holds memory that grows with the load (Benchmarks/History.md, "Memory"). So each
/// connection is checked out once by a *worker* (a task inside
/// `withConnection`) that runs one operation after another; an operation goes to an idle worker, or starts one (up to
/// ``maximumWorkers``), or waits for the next free one. A worker gives its connection back after ``idleTimeout``
/// without work, found by one sweep a second: under load postgres-nio sees a checkout per worker, not per operation.
///
/// **Renewed after an outage.** postgres-nio's pool tries to connect again after failures with a backoff that grows to
/// a minute (100 ms × 1.25ⁿ), and cannot be told to try now: after an outage of a few minutes its next attempt may come
/// a minute after the database is back, and every read and write until then waits `connect_timeout` and fails. So
/// when an operation finds no connection (``noteFailure()``), the pool tries a connection of its own every
/// ``probeInterval``; once one connects while nothing has been served since the failure and no operation holds a
/// connection (a busy pool is not a broken one), a new client takes the old one's place (its workers stop; requests
/// still waiting on it fail, and are answered 503 as before), and the next operation connects at once.
final class PostgresPool: Sendable {
    let configuration: PostgresClient.Configuration
    let probeConfiguration: PostgresConnection.Configuration
    let logger: Logger
    /// How often an outage is probed.
    let probeInterval: Duration
    /// Workers at most (each holds one connection of the client's `maximumConnections`).
    let maximumWorkers: Int
    /// How long a worker keeps its connection without work.
    let idleTimeout: Duration

    /// An operation waiting for, or handed to, a worker; it runs at most once, or is failed at most once.
    final class Job: Sendable {
        private let state: Mutex<(run: (@Sendable (PostgresConnection) async -> Void)?, fail: (@Sendable (any Error) -> Void)?)>

        init(run: @escaping @Sendable (PostgresConnection) async -> Void, fail: @escaping @Sendable (any Error) -> Void) {
            state = Mutex((run, fail))
        }

        /// The work, once (nil when it was taken or failed).
        func take() -> (@Sendable (PostgresConnection) async -> Void)? {
            state.withLock { state in
                defer { state = (nil, nil) }
                return state.run
            }
        }

        /// Fails the operation unless it was taken.
        func fail(_ error: any Error) {
            let fail = state.withLock { state in
                defer { state = (nil, nil) }
                return state.run == nil ? nil : state.fail
            }
            fail?(error)
        }
    }

    /// A task holding one checked out connection, running the jobs it is handed.
    final class Worker: Sendable {
        let id: Int
        let generation: Int
        let jobs: AsyncStream<Job?>.Continuation
        let stream: AsyncStream<Job?>

        init(id: Int, generation: Int) {
            self.id = id
            self.generation = generation
            (stream, jobs) = AsyncStream.makeStream()
        }
    }

    private struct State {
        var client: PostgresClient
        var task: Task<Void, Never>
        /// Bumped at each renewal: workers of an earlier client stop.
        var generation = 0
        var workers = 0
        var nextWorker = 0
        /// Idle workers, the most recently idle last (taken first: the others age out), with when they became idle.
        var idle: [(worker: Worker, since: ContinuousClock.Instant)] = []
        var waiting = Deque<Job>()
        /// Operations that had a connection, so far (the probe's evidence that the client recovered by itself).
        var served = 0
        /// Operations holding a connection now.
        var inUse = 0
        var probe: Task<Void, Never>?
        var sweeper: Task<Void, Never>?
        var closed = false
    }

    private let state: Mutex<State>
    private let renewalCount = Mutex(0)
    private let checkoutCount = Mutex(0)

    init(
        configuration: PostgresClient.Configuration, probe: PostgresConnection.Configuration, logger: Logger,
        probeInterval: Duration = .milliseconds(500),
        idleTimeout: Duration = .seconds(10)
    ) {
        self.configuration = configuration
        self.probeConfiguration = probe
        self.logger = logger
        self.probeInterval = probeInterval
        self.idleTimeout = idleTimeout
        // One connection is the change listener's.
        self.maximumWorkers = max(1, configuration.options.maximumConnections - 1)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        state = Mutex(State(client: client, task: Task { await client.run() }))
        let sweeper = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                self?.sweep()
            }
        }
        state.withLock { $0.sweeper = sweeper }
    }

    /// The current client.
    var client: PostgresClient { state.withLock { $0.client } }
    /// Clients renewed so far.
    var renewals: Int { renewalCount.withLock { $0 } }
    /// Connections checked out from postgres-nio so far (one per worker started).
    var checkouts: Int { checkoutCount.withLock { $0 } }

    // MARK: - Operations

    /// Runs `body` on a connection: an idle worker's, a new worker's, or the next to be free.
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let handle = Mutex<Job?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let job = Job(
                    run: { connection in
                        do { continuation.resume(returning: try await body(connection)) } catch { continuation.resume(throwing: error) }
                    },
                    fail: { continuation.resume(throwing: $0) }
                )
                handle.withLock { $0 = job }
                // Cancelled before the handle was set (the checkout watch's sweep can cancel a task that a loaded machine
                // has not run yet): the handler below found no job, so none is dispatched. Dispatched, it would wait
                // for a free worker without end while every worker is busy, and one of those may be waiting for this
                // caller (a lock it holds): a hang, seen once in a whole-suite run on a slow machine.
                if Task.isCancelled { return job.fail(CancellationError()) }
                dispatch(job)
            }
        } onCancel: {
            // Still waiting for a connection: it is failed now (the checkout watch's timeout, a cancelled request), and
            // never runs. Once running, it finishes. (A task's cancelled flag is set before this runs: a job whose handle
            // is set after this found none sees the flag above.)
            if let job = handle.withLock({ $0 }) {
                state.withLock { state in state.waiting.removeAll { $0 === job } }
                job.fail(CancellationError())
            }
        }
    }

    private enum Dispatch { case worker(Worker), start(id: Int, generation: Int, client: PostgresClient), wait, closed }

    private func dispatch(_ job: Job) {
        let next = state.withLock { state -> Dispatch in
            guard !state.closed else { return .closed }
            if let (worker, _) = state.idle.popLast() { return .worker(worker) }
            if state.workers < maximumWorkers {
                state.workers += 1
                state.nextWorker += 1
                return .start(id: state.nextWorker, generation: state.generation, client: state.client)
            }
            state.waiting.append(job)
            return .wait
        }
        switch next {
        case .worker(let worker): worker.jobs.yield(job)
        case .start(let id, let generation, let client): start(Worker(id: id, generation: generation), on: client, first: job)
        case .wait: break
        case .closed: job.fail(PoolClosed())
        }
    }

    /// A worker's life: checkout a connection, run jobs until told to stop (or the connection or its client is gone).
    private func start(_ worker: Worker, on client: PostgresClient, first: Job) {
        checkoutCount.withLock { $0 += 1 }
        Task {
            var pending: Job? = first
            do {
                try await client.withConnection { connection in
                    var iterator = worker.stream.makeAsyncIterator()
                    while true {
                        if let job = pending {
                            pending = nil
                            if connection.isClosed {
                                // A connection lost while idle: the job goes to another worker.
                                self.dispatch(job)
                                break
                            }
                            // Taken unless its caller gave up meanwhile (then this worker just has a connection).
                            if let run = job.take() {
                                self.state.withLock { state in
                                    state.served &+= 1
                                    state.inUse += 1
                                }
                                await run(connection)
                                self.state.withLock { $0.inUse -= 1 }
                                if connection.isClosed { break }
                            }
                        }
                        if let next = self.nextJob(for: worker) {
                            pending = next
                            continue
                        }
                        // Idle until handed a job, or told to stop (nil).
                        guard let next = await iterator.next(), let job = next else { break }
                        pending = job
                    }
                }
            } catch {
                // No connection (the database cannot be reached, the client shut down): the job that started this worker
                // fails with why, the others that wait get their own chance.
                first.fail(error)
                pending?.fail(error)
            }
            worker.jobs.finish()
            let waiting = state.withLock { state -> Job? in
                state.workers -= 1
                state.idle.removeAll { $0.worker === worker }
                // A job that waited for a worker starts one in this one's place.
                return state.waiting.isEmpty || state.closed ? nil : state.waiting.removeFirst()
            }
            if let waiting { dispatch(waiting) }
        }
    }

    /// After a job: the next one waiting, or nil (the worker is idle, or, of an earlier client, stops).
    private func nextJob(for worker: Worker) -> Job? {
        state.withLock { state in
            if worker.generation == state.generation, !state.closed, !state.waiting.isEmpty { return state.waiting.removeFirst() }
            if worker.generation == state.generation, !state.closed {
                state.idle.append((worker, .now))
            } else {
                worker.jobs.yield(nil)
            }
            return nil
        }
    }

    /// Stops workers idle longer than ``idleTimeout``: their connections go back to postgres-nio's pool, which closes
    /// them after its own idle time.
    private func sweep() {
        let now = ContinuousClock.now
        let expired = state.withLock { state -> [Worker] in
            let expired = state.idle.filter { now - $0.since >= idleTimeout }.map(\.worker)
            state.idle.removeAll { now - $0.since >= idleTimeout }
            return expired
        }
        for worker in expired { worker.jobs.yield(nil) }
    }

    // MARK: - Outages

    /// An operation found no connection in time: probe the database until a connection of the pool's own can be
    /// made, and renew the client if it has not recovered by then.
    func noteFailure() {
        state.withLock { state in
            guard state.probe == nil, !state.closed else { return }
            let servedAtFailure = state.served
            state.probe = Task { [self] in await self.probe(servedAtFailure: servedAtFailure) }
        }
    }

    private func probe(servedAtFailure: Int) async {
        defer { state.withLock { $0.probe = nil } }
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            // Recovered by itself, busy rather than cut off (a connection is in use), or closing: nothing to renew.
            if state.withLock({ $0.served != servedAtFailure || $0.inUse > 0 || $0.closed }) { return }
            do {
                let connection = try await PostgresConnection.connect(configuration: probeConfiguration, id: -attempt, logger: logger)
                try? await connection.close()
            } catch {
                try? await Task.sleep(for: probeInterval)
                continue
            }
            // The database answers; give the client a moment to notice by itself before replacing it.
            try? await Task.sleep(for: .milliseconds(200))
            let renewed = state.withLock { state -> (old: Task<Void, Never>, idle: [Worker])? in
                guard state.served == servedAtFailure, state.inUse == 0, !state.closed else { return nil }
                let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
                let old = state.task
                state.client = client
                state.task = Task { await client.run() }
                state.generation += 1
                let idle = state.idle.map(\.worker)
                state.idle = []
                return (old, idle)
            }
            guard let renewed else { return }
            renewalCount.withLock { $0 += 1 }
            logger.notice("the database answers again: its connection pool is renewed, so that requests connect at once")
            for worker in renewed.idle { worker.jobs.yield(nil) }
            renewed.old.cancel()
            return
        }
    }

    // MARK: - Closing

    /// Stops every worker, the probe and the client.
    func close() async {
        let (task, probe, sweeper, idle, waiting) = state.withLock { state in
            state.closed = true
            defer {
                state.idle = []
                state.waiting = []
            }
            return (state.task, state.probe, state.sweeper, state.idle.map(\.worker), Array(state.waiting))
        }
        for job in waiting { job.fail(PoolClosed()) }
        for worker in idle { worker.jobs.yield(nil) }
        sweeper?.cancel()
        probe?.cancel()
        await probe?.value
        task.cancel()
        await task.value
    }

    /// Cancels without waiting (deinitialization).
    func cancel() {
        let (idle, waiting) = state.withLock { state in
            state.closed = true
            state.probe?.cancel()
            state.sweeper?.cancel()
            state.task.cancel()
            defer {
                state.idle = []
                state.waiting = []
            }
            return (state.idle.map(\.worker), Array(state.waiting))
        }
        for job in waiting { job.fail(PoolClosed()) }
        for worker in idle { worker.jobs.yield(nil) }
    }
}

/// The store was closed while an operation waited for a connection.
struct PoolClosed: Error, CustomStringConvertible {
    var description: String { "the database's connections are closed (the store is shutting down)" }
}
