import AppStoreSimulator
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// `storekeeper bench simulator`: one App Store simulator on a temporary directory (its SQLite database with durable
/// commits), served on loopback, with a minimal receiver that answers 200 to every notification. Concurrent clients
/// buy through the control API (`POST /simulator/v1/purchases`); the receiver notes when each notification arrives.
package enum SimulatorBenchmark {
    /// What to run.
    package struct Options: Sendable {
        package var purchases = 10_000
        package var concurrency = 16
        /// Customers the purchases are spread over (each buys the product repeatedly).
        package var customers = 100
        /// A consumable (one notification per purchase) unless told otherwise.
        package var productId = "coins.100"

        package init() {}
    }

    /// What it prints.
    package struct Result: Codable, Sendable {
        package var benchmark = "simulator"
        package var storage = "SQLite (WAL, synchronous=FULL) in a temporary simulator directory"
        package var customers: Int
        package var productId: String
        /// The purchases: throughput (purchases per second), latency p50/p99.
        package var purchases: ServerBenchmark.Run
        package var notifications: Delivery
        /// `simulator.sqlite` and its WAL after the run.
        package var databaseBytes: Int64
        package var databaseBytesPerNotification: Int64
    }

    /// Notifications as the receiver saw them.
    package struct Delivery: Codable, Sendable {
        package var delivered: Int
        /// From the first purchase to the last notification's arrival.
        package var seconds: Double
        package var perSecond: Double
        /// Notifications per second in each slice of 1,000 consecutive arrivals.
        package var perSecondBySlice: [Double]
        package var firstSlice: Double?
        package var lastSlice: Double?
        /// How long the last notification arrived after the last purchase was answered.
        package var drainSeconds: Double
    }

    package static func run(_ options: Options) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("simulator-bench-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory)
        let simulator = try Simulator(directory: simulatorDirectory)
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        let arrivals = Arrivals()
        let ports = AsyncStream<(String, Int)>.makeStream()
        let receiverRouter = Router()
        receiverRouter.post("/notifications") { request, _ -> HTTPResponse.Status in
            _ = try await request.body.collect(upTo: 1 << 20)
            arrivals.note()
            return .ok
        }
        let receiver = Application(
            router: receiverRouter, configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: "receiver"),
            onServerRunning: { ports.continuation.yield(("receiver", $0.localAddress?.port ?? 0)) }, logger: logger
        )
        let deliverer = NotificationDeliverer(simulator: simulator, logger: logger)
        let app = SimulatorApplication.build(
            simulator: simulator, deliverer: deliverer, port: 0, logger: logger,
            onServerRunning: { ports.continuation.yield(("simulator", $0)) }
        )
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask {
                try await receiver.runService(gracefulShutdownSignals: [])
                return nil
            }
            group.addTask {
                try await app.runService(gracefulShutdownSignals: [])
                return nil
            }
            var found: [String: Int] = [:]
            for await (name, port) in ports.stream {
                found[name] = port
                if found.count == 2 { break }
            }
            guard let simulatorPort = found["simulator"], let receiverPort = found["receiver"] else {
                throw VerifyBenchmark.BenchmarkError(message: "the simulator or the receiver did not start")
            }
            let customers = (0..<options.customers).map { "customer-\($0)" }
            _ = try await simulator.perform { (engine) throws(SimulatorError) in
                engine.setNotificationURL("http://127.0.0.1:\(receiverPort)/notifications")
                for customer in customers { try engine.createCustomer(id: customer) }
            }
            let bodies = (0..<options.purchases).map { index in
                ByteBuffer(string: #"{"customerId":"\#(customers[index % customers.count])","productId":"\#(options.productId)"}"#)
            }
            let clock = ContinuousClock()
            let began = clock.now
            arrivals.start(at: began)
            let run = try await ServerBenchmark.drive(bodies, ports: [simulatorPort], concurrency: options.concurrency, rate: nil) {
                connection, body in
                try await connection.send(.POST, "/simulator/v1/purchases", headers: [("Content-Type", "application/json")], body: body)
            }
            let answered = clock.now
            while arrivals.count < options.purchases, clock.now - answered < .seconds(120) {
                try await Task.sleep(for: .milliseconds(20))
            }
            let times = arrivals.times
            group.cancelAll()
            let delivery = Self.delivery(times, began: began, answered: answered)
            let bytes = [simulatorDirectory.databaseFile.path, simulatorDirectory.databaseFile.path + "-wal"].reduce(Int64(0)) {
                $0 + ((try? FileManager.default.attributesOfItem(atPath: $1)[.size] as? NSNumber)?.int64Value ?? 0)
            }
            return Result(
                customers: options.customers, productId: options.productId, purchases: run, notifications: delivery,
                databaseBytes: bytes, databaseBytesPerNotification: times.isEmpty ? 0 : bytes / Int64(times.count)
            )
        }!
    }

    static func delivery(_ times: [ContinuousClock.Instant], began: ContinuousClock.Instant, answered: ContinuousClock.Instant) -> Delivery {
        func round(_ value: Double) -> Double { (value * 10).rounded() / 10 }
        var slices: [Double] = []
        var sliceStart = began
        var index = 999
        while index < times.count {
            slices.append(round(1000 / ((times[index] - sliceStart) / .seconds(1))))
            sliceStart = times[index]
            index += 1000
        }
        let seconds = ((times.last ?? began) - began) / .seconds(1)
        return Delivery(
            delivered: times.count, seconds: (seconds * 100).rounded() / 100,
            perSecond: seconds > 0 ? round(Double(times.count) / seconds) : 0, perSecondBySlice: slices,
            firstSlice: slices.first, lastSlice: slices.last,
            drainSeconds: (max(0, ((times.last ?? answered) - answered) / .seconds(1)) * 1000).rounded() / 1000
        )
    }

    /// When each notification reached the receiver.
    final class Arrivals: Sendable {
        private let state = Mutex<(started: Bool, times: [ContinuousClock.Instant])>((false, []))

        func start(at instant: ContinuousClock.Instant) {
            state.withLock { $0 = (true, []) }
        }

        func note() {
            let now = ContinuousClock.now
            state.withLock { if $0.started { $0.times.append(now) } }
        }

        var count: Int { state.withLock { $0.times.count } }
        var times: [ContinuousClock.Instant] { state.withLock { $0.times } }
    }
}
