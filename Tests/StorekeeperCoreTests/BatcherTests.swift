import StorekeeperCore
import StorekeeperTesting
import Synchronization
import Testing

/// When a batcher starts a batch, and what goes in it: at once when idle, together while a batch runs, and another
/// worker only once enough wait.
@Suite("Batcher: when batches start and what they hold")
struct BatcherTests {
    /// Batches started so far, each held until the test lets it finish.
    final class HeldRuns: Sendable {
        private let state = Mutex<(started: [[Int]], gates: [CheckedContinuation<Void, Never>])>(([], []))

        var started: [[Int]] { state.withLock { $0.started } }

        func run(_ items: [Int]) async -> [Result<String, StorageError>] {
            await withCheckedContinuation { continuation in
                state.withLock {
                    $0.started.append(items)
                    $0.gates.append(continuation)
                }
            }
            return items.map { .success("answer \($0)") }
        }

        /// Lets every batch started so far finish.
        func releaseAll() {
            let gates = state.withLock { state in
                defer { state.gates = [] }
                return state.gates
            }
            for gate in gates { gate.resume() }
        }
    }

    /// Waits (up to 5 s) until `condition` holds.
    static func eventually(_ what: String, _ condition: () -> Bool) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(5)
        while !condition() {
            guard clock.now < deadline else { throw StorageError("not within 5 s: \(what)") }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Submits `items` in order, each once the one before is queued or taken by a worker (a worker started for it
    /// may not have begun its batch yet: what a test expects to start, it waits for).
    static func submit(_ items: Range<Int>, to batcher: Batcher<Int, String>, _ runs: HeldRuns) async throws -> [Task<String, any Error>] {
        var tasks: [Task<String, any Error>] = []
        for item in items {
            let before = batcher.waiting + batcher.completed.items
            tasks.append(Task { try await batcher.submit(item, run: runs.run) })
            try await eventually("request \(item) queued or taken") { batcher.waiting + batcher.completed.items == before + 1 }
        }
        return tasks
    }

    /// Gives a worker that should not start the time to show that it did (what must not happen cannot be waited for).
    static func settle() async throws { try await Task.sleep(for: .milliseconds(50)) }

    /// Starts request 0 and holds its batch, then submits `waiting` behind it; checks that none of them started.
    static func holdFirst(_ batcher: Batcher<Int, String>, _ runs: HeldRuns, then waiting: Range<Int>) async throws -> [Task<String, any Error>] {
        var tasks = try await submit(0..<1, to: batcher, runs)
        try await eventually("the first request started") { runs.started == [[0]] }
        tasks += try await submit(waiting, to: batcher, runs)
        try await settle()
        #expect(runs.started == [[0]])
        return tasks
    }

    /// Lets batches finish until every task has its answer; checks each is its own request's.
    static func finish(_ tasks: [Task<String, any Error>], _ runs: HeldRuns, first: Int = 0) async throws {
        let all = Task {
            var answers: [String] = []
            for task in tasks { answers.append(try await task.value) }
            return answers
        }
        let done = Mutex(false)
        let releaser = Task {
            while !done.withLock({ $0 }) {
                runs.releaseAll()
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
        let answers = try await all.value
        done.withLock { $0 = true }
        await releaser.value
        #expect(answers == (first..<first + tasks.count).map { "answer \($0)" })
    }

    @Test("idle: a request starts at once, alone; fewer than `gathering` arriving meanwhile wait, then go as one batch")
    func gathersWhileABatchRuns() async throws {
        let batcher = Batcher<Int, String>(workers: 4, maximumBatch: 32, gathering: 6, longestWait: .seconds(60))
        let runs = HeldRuns()
        let tasks = try await Self.holdFirst(batcher, runs, then: 1..<6)
        #expect(batcher.waiting == 5)
        try await Self.finish(tasks, runs)
        #expect(runs.started == [[0], [1, 2, 3, 4, 5]])
        #expect(batcher.completed == (batches: 2, items: 6))
    }

    @Test("`gathering` requests waiting start another worker, with all of them; never more than `workers` at once")
    func enoughWaitingStartAnother() async throws {
        let batcher = Batcher<Int, String>(workers: 2, maximumBatch: 32, gathering: 3, longestWait: .seconds(60))
        let runs = HeldRuns()
        var tasks = try await Self.holdFirst(batcher, runs, then: 1..<3)
        tasks += try await Self.submit(3..<4, to: batcher, runs)
        // The third waiting request started a second worker with the three.
        try await Self.eventually("a second worker started with the three waiting") { runs.started == [[0], [1, 2, 3]] }
        #expect(batcher.waiting == 0)
        // Both workers busy: however many wait, none starts.
        tasks += try await Self.submit(4..<12, to: batcher, runs)
        try await Self.settle()
        #expect(runs.started.count == 2)
        #expect(batcher.waiting == 8)
        try await Self.finish(tasks, runs)
        #expect(Array(runs.started.joined()).sorted() == Array(0..<12))
        #expect(runs.started.count == 3, "the eight waiting went in one batch: \(runs.started)")
    }

    @Test("gathering 1: every free worker starts at once (batches of one while workers are free)")
    func gatheringOneStartsEachFreeWorker() async throws {
        let batcher = Batcher<Int, String>(workers: 3, maximumBatch: 32, gathering: 1)
        let runs = HeldRuns()
        var tasks: [Task<String, any Error>] = []
        for item in 0..<3 {
            tasks += try await Self.submit(item..<item + 1, to: batcher, runs)
            try await Self.eventually("request \(item) started alone") { runs.started.count == item + 1 }
        }
        #expect(runs.started == [[0], [1], [2]])
        tasks += try await Self.submit(3..<5, to: batcher, runs)
        try await Self.settle()
        #expect(runs.started.count == 3)
        #expect(batcher.waiting == 2)
        try await Self.finish(tasks, runs)
        #expect(runs.started.count == 4 && runs.started[3] == [3, 4])
    }

    @Test("a batch holds at most `maximumBatch`, oldest first; `gathering` is at most `maximumBatch`")
    func batchesAreBounded() async throws {
        #expect(Batcher<Int, String>(workers: 4, maximumBatch: 1, gathering: 6).gathering == 1)
        #expect(Batcher<Int, String>(workers: 4, maximumBatch: 32, gathering: 0).gathering == 1)
        let batcher = Batcher<Int, String>(workers: 1, maximumBatch: 4, gathering: 4, longestWait: .seconds(60))
        let runs = HeldRuns()
        let tasks = try await Self.holdFirst(batcher, runs, then: 1..<11)
        try await Self.finish(tasks, runs)
        #expect(runs.started == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9, 10]])
    }

    @Test("a request waiting behind a held-up batch while a worker is free starts one after `longestWait`, not before")
    func waitIsBounded() async throws {
        let batcher = Batcher<Int, String>(workers: 2, maximumBatch: 32, gathering: 6, longestWait: .milliseconds(300))
        let runs = HeldRuns()
        var tasks = try await Self.submit(0..<1, to: batcher, runs)
        try await Self.eventually("the first request started") { runs.started == [[0]] }
        let queued = ContinuousClock.now
        tasks += try await Self.submit(1..<3, to: batcher, runs)
        try await Self.eventually("the two waiting started a second worker") { runs.started.count == 2 }
        #expect(ContinuousClock.now - queued >= .milliseconds(300))
        #expect(runs.started == [[0], [1, 2]])
        // Both workers busy: a third waits for one of them, however long.
        tasks += try await Self.submit(3..<4, to: batcher, runs)
        try await Task.sleep(for: .milliseconds(600))
        #expect(runs.started.count == 2)
        try await Self.finish(tasks, runs)
        #expect(runs.started == [[0], [1, 2], [3]])
    }
}
