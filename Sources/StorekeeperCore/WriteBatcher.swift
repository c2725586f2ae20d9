import Synchronization

/// Group commit for a store whose every commit costs round trips and a flush to disk (PostgreSQL): writes that
/// arrive while all of its `writers` are busy wait, and the next writer to be free takes all that wait (up to
/// `maximumBatch`, oldest first) and writes them as one unit of work. Nothing waits on purpose: a write arriving
/// while a writer is free starts at once, alone; batches form only under load, where they cut the cost of each write
/// (one transaction, one commit, and a few statements for the whole batch instead of each write's own).
///
/// Each caller gets its own write's answer once the batch it was in has committed (or failed), so an
/// acknowledgement still means "durable". How a batch is written, and what a failure of one of its writes does to the
/// others, is the store's `run`.
public final class WriteBatcher<Item: Sendable, Answer: Sendable>: Sendable {
    /// Writes a batch; answers one result per item, in order.
    public typealias Run = @Sendable ([Item]) async -> [Result<Answer, StorageError>]

    private struct Waiting: Sendable {
        var item: Item
        var continuation: CheckedContinuation<Result<Answer, StorageError>, Never>
    }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        var busyWriters = 0
    }

    /// How many batches may be written at once.
    public let writers: Int
    /// The most writes in one batch.
    public let maximumBatch: Int
    private let state = Mutex(State())
    private let batches = Mutex<(batches: Int, items: Int)>((0, 0))

    public init(writers: Int, maximumBatch: Int) {
        self.writers = max(1, writers)
        self.maximumBatch = max(1, maximumBatch)
    }

    /// Batches written so far and the writes they held (their ratio is the mean batch size).
    public var written: (batches: Int, items: Int) { batches.withLock { $0 } }

    /// Writes `item` with whatever else waits, through `run` (the same for every call: the writer that takes a batch
    /// runs the `run` of the call that made it busy).
    public func write(_ item: Item, run: @escaping Run) async throws(StorageError) -> Answer {
        let result = await withCheckedContinuation { continuation in
            let starts = state.withLock { state in
                state.waiting.append(Waiting(item: item, continuation: continuation))
                guard state.busyWriters < writers else { return false }
                state.busyWriters += 1
                return true
            }
            if starts { Task { await self.drain(run) } }
        }
        return try result.get()
    }

    /// Writes batches until none waits.
    private func drain(_ run: Run) async {
        while true {
            let batch = state.withLock { state in
                let batch = Array(state.waiting.prefix(maximumBatch))
                state.waiting.removeFirst(batch.count)
                if batch.isEmpty { state.busyWriters -= 1 }
                return batch
            }
            guard !batch.isEmpty else { return }
            batches.withLock { $0 = ($0.batches + 1, $0.items + batch.count) }
            let results = await run(batch.map(\.item))
            for (index, waiting) in batch.enumerated() {
                waiting.continuation.resume(
                    returning: index < results.count ? results[index] : .failure(StorageError("a batched write got no answer"))
                )
            }
        }
    }
}
