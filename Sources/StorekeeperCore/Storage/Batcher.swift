import Synchronization

/// Work that arrives together is done together, for a store whose every commit costs a flush to disk (both), and
/// whose every statement costs a round trip and the database's own start-up work (PostgreSQL) or whose one writer
/// makes every write wait for the one before (SQLite: one worker). A request that arrives
/// while no worker is busy starts at once, alone. One that arrives while a batch is running waits, and the next worker
/// to be free takes all that wait (up to `maximumBatch`, oldest first) and runs them as one; another worker (up to
/// `workers`) starts only once `gathering` requests wait. A batch costs about what one request alone costs, so under
/// load a few large batches do the work of many small ones for less of the machine, where starting every free worker
/// at once keeps the batches small (Benchmarks/History.md, tenth round). The wait this adds is bounded: by one batch's
/// time, and by `longestWait` (default 20 ms) while a worker is free, so a batch held up (by a lock another instance
/// holds, say) holds up the requests behind it no longer than that.
///
/// Each store uses one for live notifications (group commit: one transaction, one commit and a few statements for the
/// whole batch; each caller is answered once the batch has committed, so an acknowledgement still means "durable")
/// and one for customer reads (one statement reads every customer of the batch).
///
/// Each caller gets its own request's answer. How a batch is run, and what a failure of one of its requests does to
/// the others, is the store's `run`.
package final class Batcher<Item: Sendable, Answer: Sendable>: Sendable {
    /// Runs a batch; answers one result per item, in order.
    package typealias Run = @Sendable ([Item]) async -> [Result<Answer, StorageError>]

    private struct Waiting: Sendable {
        var item: Item
        var continuation: CheckedContinuation<Result<Answer, StorageError>, Never>
        var since: ContinuousClock.Instant
    }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        var busyWorkers = 0
        /// Whether a ``watch(_:)`` is armed.
        var watching = false
    }

    private enum Next { case start, watch, none }

    /// How many batches may run at once.
    package let workers: Int
    /// The most requests in one batch.
    package let maximumBatch: Int
    /// How many requests must wait, while a worker is busy, before another starts (1: whenever one is free).
    package let gathering: Int
    /// The longest a request waits for a batch while a worker is free: past it, another starts with what waits.
    package let longestWait: Duration
    private let state = Mutex(State())
    private let counts = Mutex<(batches: Int, items: Int)>((0, 0))

    /// `gathering` is at most `maximumBatch` (with batches of one, each request is its own batch, and starts as soon
    /// as a worker is free).
    package init(workers: Int, maximumBatch: Int, gathering: Int = 1, longestWait: Duration = .milliseconds(20)) {
        self.workers = max(1, workers)
        self.maximumBatch = max(1, maximumBatch)
        self.gathering = min(max(1, gathering), self.maximumBatch)
        self.longestWait = longestWait
    }

    /// Batches run so far and the requests they held (their ratio is the mean batch size).
    package var completed: (batches: Int, items: Int) { counts.withLock { $0 } }

    /// Requests waiting for a worker now.
    package var waiting: Int { state.withLock { $0.waiting.count } }

    /// Requests per batch so far, to one decimal; `nil` before the first batch.
    package var meanBatchSize: Double? {
        let (batches, items) = completed
        return batches > 0 ? (Double(items) / Double(batches) * 10).rounded() / 10 : nil
    }

    /// Runs `item` with whatever else waits, through `run` (the same for every call: the worker that takes a batch
    /// runs the `run` of the call that made it busy).
    package func submit(_ item: Item, run: @escaping Run) async throws(StorageError) -> Answer {
        let now = ContinuousClock.now
        let result = await withCheckedContinuation { continuation in
            let next = state.withLock { state -> Next in
                state.waiting.append(Waiting(item: item, continuation: continuation, since: now))
                if state.busyWorkers == 0 || (state.busyWorkers < workers && state.waiting.count >= gathering) {
                    state.busyWorkers += 1
                    return .start
                }
                guard state.busyWorkers < workers, !state.watching else { return .none }
                state.watching = true
                return .watch
            }
            switch next {
            case .start: Task { await self.drain(run) }
            case .watch: Task { await self.watch(run) }
            case .none: break
            }
        }
        return try result.get()
    }

    /// Starts another worker once the oldest request has waited ``longestWait`` while one is free: a batch held up
    /// (by a lock another instance holds, say) holds up the requests behind it for that long, not until it ends. One
    /// watch at a time, armed when a request waits behind a busy worker with another free; it ends when nothing waits
    /// or every worker is busy (a worker, once free, takes what waits).
    private func watch(_ run: @escaping Run) async {
        var delay = longestWait
        while true {
            try? await Task.sleep(for: delay)
            let now = ContinuousClock.now
            let next = state.withLock { state -> Duration? in
                guard let oldest = state.waiting.first, state.busyWorkers < workers else {
                    state.watching = false
                    return nil
                }
                let waited = now - oldest.since
                guard waited >= longestWait else { return longestWait - waited }
                state.busyWorkers += 1
                state.watching = false
                return .zero
            }
            guard let next else { return }
            guard next > .zero else { return await drain(run) }
            delay = next
        }
    }

    /// What a `run` does when its batch as a whole failed for a reason that may be one request's: runs each request
    /// alone, all at once, so that only the one at fault fails.
    package static func eachAlone(
        _ items: [Item], _ body: @escaping @Sendable (Item) async throws(StorageError) -> Answer
    ) async -> [Result<Answer, StorageError>] {
        await withTaskGroup(of: (Int, Result<Answer, StorageError>).self) { group in
            for (index, item) in items.enumerated() {
                group.addTask {
                    do throws(StorageError) {
                        return (index, .success(try await body(item)))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var results = [Result<Answer, StorageError>](repeating: .failure(StorageError("not run")), count: items.count)
            for await (index, result) in group { results[index] = result }
            return results
        }
    }

    /// Runs batches until none waits.
    private func drain(_ run: Run) async {
        while true {
            let batch = state.withLock { state in
                let batch = Array(state.waiting.prefix(maximumBatch))
                state.waiting.removeFirst(batch.count)
                if batch.isEmpty { state.busyWorkers -= 1 }
                return batch
            }
            guard !batch.isEmpty else { return }
            counts.withLock { $0 = ($0.batches + 1, $0.items + batch.count) }
            // Not `\.item`: in a generic type, a key path is built at run time, on every batch.
            let results = await BatchArrival.$oldest.withValue(batch[0].since) { await run(batch.map { $0.item }) }
            for (index, waiting) in batch.enumerated() {
                waiting.continuation.resume(
                    returning: index < results.count ? results[index] : .failure(StorageError("a batched request got no answer"))
                )
            }
        }
    }
}

/// When the oldest request of the batch being run arrived (set while a ``Batcher``'s `run` runs, oldest first), so
/// that a store bounds a batch's wait for a connection from that request's arrival, not from the batch's start: a
/// request that waited for a free worker behind a batch that itself waited for a connection (a database that stopped
/// answering) would otherwise wait for both, up to twice `connect_timeout`.
package enum BatchArrival {
    @TaskLocal package static var oldest: ContinuousClock.Instant?
}
