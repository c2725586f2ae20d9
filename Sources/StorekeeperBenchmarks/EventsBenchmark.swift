import AppStoreModels
import AppStoreSimulator
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperServer
import Synchronization

/// `storekeeper bench events`: what the outbox costs ingestion (the same notifications posted with the outbox on and
/// off, alternated), and how fast and how soon its events reach a local webhook receiver (events per second, and the
/// time from an event's commit to its delivery).
package enum EventsBenchmark {
    package struct Result: Codable, Sendable {
        package var benchmark = "events"
        package var storage: String
        package var notifications: Int
        package var concurrency: Int
        /// Notifications per second of each round, in the order run (on, off, on, off, …). Like every figure of the
        /// rounds, absent with `--rounds 0`.
        package var ingestOutboxOn: [Double]?
        package var ingestOutboxOff: [Double]?
        /// 1 − median(on) / median(off), in percent: what the outbox costs ingestion (absent with `--rounds 0`, as
        /// every figure of the rounds).
        package var outboxCostPercent: Double?
        /// 1 − on / off of each round (its two halves run back to back, in alternating order), in percent.
        package var outboxCostPercentByRound: [Double]?
        /// The median of ``outboxCostPercentByRound``: steadier than ``outboxCostPercent`` when the machine's speed
        /// drifts from round to round.
        package var outboxCostPercentPaired: Double?
        /// The process's CPU time (user and system, every thread: server and load alike) per notification posted, in
        /// microseconds, of each round. Steadier than throughput on a busy machine: with every core saturated,
        /// throughput follows it.
        package var cpuMicrosecondsOutboxOn: [Double]?
        package var cpuMicrosecondsOutboxOff: [Double]?
        /// median(on) / median(off) − 1 of the CPU per notification, in percent.
        package var outboxCPUCostPercent: Double?
        /// The median over rounds of on − off of the CPU per notification, in microseconds: the outbox's own CPU.
        package var outboxCPUMicrosecondsPaired: Double?
        /// Events the outbox appended per notification (in an outbox-on round).
        package var eventsPerNotification: Double?
        /// Notifications per write transaction (the store's group commit), of each round, as the ingest rates: what
        /// the writer's time per commit is spread over.
        package var notificationsPerCommitOutboxOn: [Double]?
        package var notificationsPerCommitOutboxOff: [Double]?
        /// `nil` without `--pairs`.
        package var interleaved: Interleaved?
        /// `nil` with `--no-delivery`.
        package var delivery: Delivery?
    }

    /// The outbox turned on and off in turns within one server and one ledger: segments of `notifications` each,
    /// in pairs (on then off, then off then on). A pair's two segments run a fraction of a second apart on the same
    /// process, file and caches, so the machine's drift between rounds (up to 25 %) does not enter their ratio.
    package struct Interleaved: Codable, Sendable {
        package var notificationsPerSegment: Int
        package var pairs: Int
        /// Notifications per second of each segment, pair by pair.
        package var ingestOutboxOn: [Double]
        package var ingestOutboxOff: [Double]
        /// 1 − on / off of each pair, in percent.
        package var outboxCostPercentByPair: [Double]
        /// Their median: what the outbox costs ingestion.
        package var outboxCostPercent: Double
        /// 1 − the sum of on's rates / the sum of off's, in percent (every segment has the same number of notifications).
        package var outboxCostPercentPooled: Double
        /// The median over pairs of on − off of the process's CPU per notification, in microseconds.
        package var outboxCPUMicrosecondsPaired: Double
        /// Events appended per notification while the outbox was on, and in all while it was off (none: the check that
        /// an outbox turned off does none of its work).
        package var eventsPerNotificationOutboxOn: Double
        package var eventsOutboxOff: Int64
    }

    package struct Delivery: Codable, Sendable {
        package var instances: Int
        package var events: Int
        /// From the first notification posted to the last event delivered.
        package var seconds: Double
        package var eventsPerSecond: Double
        /// From an event's decision in its write transaction to its arrival at the receiver.
        package var p50Milliseconds: Double
        package var p99Milliseconds: Double
        package var maxMilliseconds: Double
    }

    package static func run(
        count: Int, concurrency: Int, rounds: Int, pairs: Int = 0, storage: ServerBenchmark.Storage, delivery measured: Bool = true
    ) async throws -> Result {
        var on: [Double] = []
        var off: [Double] = []
        var cpuOn: [Double] = []
        var cpuOff: [Double] = []
        var description = ""
        var eventsPerNotification = 0.0
        var perCommitOn: [Double] = []
        var perCommitOff: [Double] = []
        for round in 0..<rounds {
            // On then off, then off then on: neither side always runs second (after the other warmed the machine).
            for outbox in round.isMultiple(of: 2) ? [true, false] : [false, true] {
                let (throughput, cpu, events, perCommit, storageDescription) = try await ingest(
                    count: count, concurrency: concurrency, storage: ServerBenchmark.Storage(postgres: storage.postgres), outbox: outbox)
                description = storageDescription
                if outbox {
                    on.append(throughput)
                    cpuOn.append(cpu)
                    perCommitOn.append(perCommit)
                    eventsPerNotification = Double(events) / Double(count)
                } else {
                    off.append(throughput)
                    cpuOff.append(cpu)
                    perCommitOff.append(perCommit)
                }
            }
        }
        var interleaved: Interleaved?
        if pairs > 0 {
            let (measured, storageDescription) = try await interleave(count: count, pairs: pairs, concurrency: concurrency, storage: storage)
            interleaved = measured
            if description.isEmpty { description = storageDescription }
        }
        let delivery = measured ? try await deliver(count: count, concurrency: concurrency, storage: storage) : nil
        // Each round's on and off ran back to back: their ratio is free of the machine's drift between rounds.
        let paired = zip(on, off).map { ((1 - $0 / $1) * 1_000).rounded() / 10 }
        guard !on.isEmpty else {
            return Result(
                storage: description, notifications: count, concurrency: concurrency, ingestOutboxOn: nil, ingestOutboxOff: nil,
                outboxCostPercent: nil, outboxCostPercentByRound: nil, outboxCostPercentPaired: nil, cpuMicrosecondsOutboxOn: nil,
                cpuMicrosecondsOutboxOff: nil, outboxCPUCostPercent: nil, outboxCPUMicrosecondsPaired: nil, eventsPerNotification: nil,
                notificationsPerCommitOutboxOn: nil, notificationsPerCommitOutboxOff: nil, interleaved: interleaved, delivery: delivery)
        }
        return Result(
            storage: description, notifications: count, concurrency: concurrency, ingestOutboxOn: on, ingestOutboxOff: off,
            outboxCostPercent: ((1 - median(on) / median(off)) * 1_000).rounded() / 10, outboxCostPercentByRound: paired,
            outboxCostPercentPaired: (median(paired) * 10).rounded() / 10, cpuMicrosecondsOutboxOn: cpuOn,
            cpuMicrosecondsOutboxOff: cpuOff, outboxCPUCostPercent: ((median(cpuOn) / median(cpuOff) - 1) * 1_000).rounded() / 10,
            outboxCPUMicrosecondsPaired: (median(zip(cpuOn, cpuOff).map { $0 - $1 }) * 10).rounded() / 10,
            eventsPerNotification: eventsPerNotification, notificationsPerCommitOutboxOn: perCommitOn,
            notificationsPerCommitOutboxOff: perCommitOff, interleaved: interleaved, delivery: delivery)
    }

    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return sorted.count.isMultiple(of: 2) ? (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2 : sorted[sorted.count / 2]
    }

    /// `pairs` pairs of segments of `count` notifications, the outbox on and off in turns, on one server and ledger.
    /// Every notification is a new customer's first purchase, so a segment with the outbox off leaves nothing an
    /// outbox-on segment's customers depend on.
    static func interleave(
        count: Int, pairs: Int, concurrency: Int, storage: ServerBenchmark.Storage
    ) async throws -> (Interleaved, storage: String) {
        try await ServerBenchmark.withServer(storage: ServerBenchmark.Storage(postgres: storage.postgres)) { ports, _, store, description in
            let bodies = try await notifications(count: count * 2 * pairs, store: store)
            var on: [Double] = []
            var off: [Double] = []
            var cpu: [Bool: [Double]] = [true: [], false: []]
            var events: [Bool: Int64] = [true: 0, false: 0]
            var segment = 0
            for pair in 0..<pairs {
                for outbox in pair.isMultiple(of: 2) ? [true, false] : [false, true] {
                    store.outbox.isEnabled = outbox
                    let part = Array(bodies[segment * count..<(segment + 1) * count])
                    segment += 1
                    let position = try await store.lastEventPosition()
                    let before = processCPUMicroseconds()
                    let run = try await ServerBenchmark.drive(part, ports: ports, concurrency: concurrency, rate: nil, post)
                    guard run.failures == 0 else { throw VerifyBenchmark.BenchmarkError(message: "\(run.failures) notifications were refused") }
                    cpu[outbox, default: []].append((processCPUMicroseconds() - before) / Double(count))
                    events[outbox, default: 0] += try await store.lastEventPosition() - position
                    if outbox { on.append(run.throughput) } else { off.append(run.throughput) }
                }
            }
            store.outbox.isEnabled = true
            func percent(_ value: Double) -> Double { (value * 1_000).rounded() / 10 }
            let byPair = zip(on, off).map { percent(1 - $0 / $1) }
            let cpuPaired = zip(cpu[true] ?? [], cpu[false] ?? []).map { $0 - $1 }
            let measured = Interleaved(
                notificationsPerSegment: count, pairs: pairs, ingestOutboxOn: on, ingestOutboxOff: off, outboxCostPercentByPair: byPair,
                outboxCostPercent: (median(byPair) * 10).rounded() / 10,
                outboxCostPercentPooled: percent(1 - on.reduce(0, +) / off.reduce(0, +)),
                outboxCPUMicrosecondsPaired: (median(cpuPaired) * 10).rounded() / 10,
                eventsPerNotificationOutboxOn: Double(events[true] ?? 0) / Double(count * pairs), eventsOutboxOff: events[false] ?? 0)
            return (measured, description)
        }
    }

    /// Customers each with a server-issued token (so every notification concerns a known customer and has events),
    /// half buying the monthly plan, half coins; their notifications, signed.
    static func notifications(count: Int, store: any LedgerStore) async throws -> [String] {
        var engine = try ServerBenchmark.engine()
        var index = 0
        while engine.state.notifications.count < count {
            let customer = "customer-\(index)"
            let token = try await store.appAccountToken(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
            try engine.createCustomer(id: "apple-\(index)")
            _ = try engine.purchase(
                .init(customerId: "apple-\(index)", productId: index % 2 == 0 ? "coins.100" : "pro.monthly", appAccountToken: token))
            index += 1
        }
        return engine.state.notifications.prefix(count).map { #"{"signedPayload":"\#($0.signedPayload)"}"# }
    }

    /// The CPU time this process has used so far (user and system, all threads), in microseconds.
    static func processCPUMicroseconds() -> Double {
        #if os(Linux)
        let RUSAGE_SELF_ID = RUSAGE_SELF.rawValue
        #else
        let RUSAGE_SELF_ID = RUSAGE_SELF
        #endif
        var usage = rusage()
        getrusage(RUSAGE_SELF_ID, &usage)
        func microseconds(_ time: timeval) -> Double { Double(time.tv_sec) * 1_000_000 + Double(time.tv_usec) }
        return microseconds(usage.ru_utime) + microseconds(usage.ru_stime)
    }

    static let post: @Sendable (LoadConnection, String) async throws -> UInt = { connection, body in
        try await connection.send(.POST, "/appstore/notifications", headers: [("Content-Type", "application/json")], body: ByteBuffer(string: body))
    }

    static func ingest(
        count: Int, concurrency: Int, storage: ServerBenchmark.Storage, outbox: Bool
    ) async throws -> (throughput: Double, cpuMicroseconds: Double, events: Int64, perCommit: Double, storage: String) {
        try await ServerBenchmark.withServer(storage: storage, outbox: outbox) { ports, _, store, description in
            let bodies = try await notifications(count: count, store: store)
            let batcher = (store as? SQLiteLedgerStore)?.notificationBatcher ?? (store as? PostgresLedgerStore)?.notificationBatcher
            let batchesBefore = batcher?.completed ?? (batches: 0, items: 0)
            let before = processCPUMicroseconds()
            let run = try await ServerBenchmark.drive(bodies, ports: ports, concurrency: concurrency, rate: nil, post)
            let cpu = (processCPUMicroseconds() - before) / Double(count)
            guard run.failures == 0 else { throw VerifyBenchmark.BenchmarkError(message: "\(run.failures) notifications were refused") }
            let batches = batcher.map { $0.completed.batches - batchesBefore.batches } ?? 0
            let items = batcher.map { $0.completed.items - batchesBefore.items } ?? 0
            let perCommit = batches > 0 ? (Double(items) / Double(batches) * 10).rounded() / 10 : 0
            return (run.throughput, (cpu * 10).rounded() / 10, try await store.lastEventPosition(), perCommit, description)
        }
    }

    /// The events of `count` notifications delivered to a receiver on this machine, by `storage.instances` servers.
    static func deliver(count: Int, concurrency: Int, storage: ServerBenchmark.Storage) async throws -> Delivery {
        let latencies = Mutex<[String: Double]>([:])
        let router = Router()
        router.post("/events") { request, _ -> HTTPResponse.Status in
            let arrived = Date()
            let body = try await request.body.collect(upTo: 1 << 20)
            struct Envelope: Decodable {
                var data: Data
                struct Data: Decodable {
                    var id: String
                    var occurredAt: Int64
                }
            }
            let event = try JSONDecoder().decode(Envelope.self, from: Foundation.Data(body.readableBytesView))
            let latency = arrived.timeIntervalSince1970 * 1_000 - Double(event.data.occurredAt)
            latencies.withLock { if $0[event.data.id] == nil { $0[event.data.id] = latency } }
            return .noContent
        }
        let ports = AsyncStream<Int>.makeStream()
        // The receiver's own log is not the benchmark's output (its cancellation at the end reads as an error).
        var quiet = Logger(label: "bench-receiver")
        quiet.logLevel = .critical
        let receiver = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in ports.continuation.yield(channel.localAddress?.port ?? 0) }, logger: quiet)
        let receiverTask = Task { try await receiver.runService(gracefulShutdownSignals: []) }
        defer { receiverTask.cancel() }
        var iterator = ports.stream.makeAsyncIterator()
        guard let port = await iterator.next() else { throw VerifyBenchmark.BenchmarkError(message: "the receiver did not start") }
        let endpoint = ServerConfiguration.WebhookEndpoint(
            name: "bench", url: "http://127.0.0.1:\(port)/events", secret: WebhookSecret.generate(), maxConcurrency: 16)
        return try await ServerBenchmark.withServer(storage: storage, webhooks: [endpoint]) { ports, _, store, _ in
            let bodies = try await notifications(count: count, store: store)
            let started = ContinuousClock.now
            let run = try await ServerBenchmark.drive(bodies, ports: ports, concurrency: concurrency, rate: nil, post)
            guard run.failures == 0 else { throw VerifyBenchmark.BenchmarkError(message: "\(run.failures) notifications were refused") }
            let events = Int(try await store.lastEventPosition())
            let deadline = ContinuousClock.now.advanced(by: .seconds(300))
            while latencies.withLock({ $0.count }) < events, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            let seconds = (ContinuousClock.now - started) / .seconds(1)
            let sorted = latencies.withLock { Array($0.values) }.sorted()
            guard sorted.count == events, events > 0 else {
                throw VerifyBenchmark.BenchmarkError(message: "\(sorted.count) of \(events) events were delivered within five minutes")
            }
            func percentile(_ p: Double) -> Double { (sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 10).rounded() / 10 }
            return Delivery(
                instances: storage.instances, events: events, seconds: (seconds * 100).rounded() / 100,
                eventsPerSecond: (Double(events) / seconds).rounded(), p50Milliseconds: percentile(0.5), p99Milliseconds: percentile(0.99),
                maxMilliseconds: (sorted.last ?? 0).rounded())
        }
    }
}
