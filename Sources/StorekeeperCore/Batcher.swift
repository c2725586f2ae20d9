import Synchronization

/// Work that arrives together is done together, for a store whose every statement costs a round trip and the
/// database's own start-up work (PostgreSQL), and whose every commit costs a flush to disk: requests that arrive while
/// all of its `workers` are busy wait, and the next worker to be free takes all that wait (up to `maximumBatch`,
/// oldest first) and runs them as one. Nothing waits on purpose: a request arriving while a worker is free starts at
/// once, alone; batches form only under load, where they cut the cost of each request.
///
/// The store uses one for live notifications (group commit: one transaction, one commit and a few statements for the
/// whole batch; each caller is answered once the batch has committed, so an acknowledgement still means "durable")
/// and one for customer reads (one statement reads every customer of the batch).
///
/// Each caller gets its own request's answer. How a batch is run, and what a failure of one of its requests does to
/// the others, is the store's `run`.
public final class Batcher<Item: Sendable, Answer: Sendable>: Sendable {
    /// Runs a batch; answers one result per item, in order.
    public typealias Run = @Sendable ([Item]) async -> [Result<Answer, StorageError>]

    private struct Waiting: Sendable {
        var item: Item
        var continuation: CheckedContinuation<Result<Answer, StorageError>, Never>
    }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        var busyWorkers = 0
    }

    /// How many batches may run at once.
    public let workers: Int
    /// The most requests in one batch.
    public let maximumBatch: Int
    private let state = Mutex(State())
    private let counts = Mutex<(batches: Int, items: Int)>((0, 0))

    public init(workers: Int, maximumBatch: Int) {
        self.workers = max(1, workers)
        self.maximumBatch = max(1, maximumBatch)
    }

    /// Batches run so far and the requests they held (their ratio is the mean batch size).
    public var completed: (batches: Int, items: Int) { counts.withLock { $0 } }

    /// Requests per batch so far, to one decimal; `nil` before the first batch.
    public var meanBatchSize: Double? {
        let (batches, items) = completed
        return batches > 0 ? (Double(items) / Double(batches) * 10).rounded() / 10 : nil
    }

    /// Runs `item` with whatever else waits, through `run` (the same for every call: the worker that takes a batch
    /// runs the `run` of the call that made it busy).
    public func submit(_ item: Item, run: @escaping Run) async throws(StorageError) -> Answer {
        let result = await withCheckedContinuation { continuation in
            let starts = state.withLock { state in
                state.waiting.append(Waiting(item: item, continuation: continuation))
                guard state.busyWorkers < workers else { return false }
                state.busyWorkers += 1
                return true
            }
            if starts { Task { await self.drain(run) } }
        }
        return try result.get()
    }

    /// What a `run` does when its batch as a whole failed for a reason that may be one request's: runs each request
    /// alone, all at once, so that only the one at fault fails.
    public static func eachAlone(
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
            let results = await run(batch.map(\.item))
            for (index, waiting) in batch.enumerated() {
                waiting.continuation.resume(
                    returning: index < results.count ? results[index] : .failure(StorageError("a batched request got no answer"))
                )
            }
        }
    }
}
