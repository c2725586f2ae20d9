import AppStoreModels
import AppStoreSigning
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
import SwiftASN1
import X509

/// `storekeeper bench ingest` and `storekeeper bench entitlements`: the server over SQLite with durable commits,
/// driven over HTTP on loopback by concurrent clients.
package enum ServerBenchmark {
    /// One measured run.
    package struct Run: Codable, Sendable {
        package var requests: Int
        package var concurrency: Int
        /// Requests per second the clients aimed at; `nil` for as fast as possible.
        package var targetRate: Double?
        package var seconds: Double
        package var throughput: Double
        package var p50Milliseconds: Double
        package var p99Milliseconds: Double
        package var maxMilliseconds: Double
        package var failures: Int
    }

    /// What `bench ingest` / `bench entitlements` print.
    package struct Result: Codable, Sendable {
        package var benchmark: String
        package var storage = "SQLite (WAL, synchronous=FULL), temporary file"
        package var fullSpeed: Run
        /// At half the full-speed throughput (the issue's latency target is stated there).
        package var halfRate: Run
        /// What the server did besides (entitlement reads only).
        package var server: ServerFigures? = nil
        /// Ingest only: the ledger's bytes in use (pages holding data, after a checkpoint) per notification applied.
        package var ledgerBytesPerNotification: Int? = nil
        /// Ingest on PostgreSQL only: notifications per transaction on the first instance, over both runs (group
        /// commit, `Batcher`).
        package var notificationsPerCommit: Double? = nil
    }

    /// The server's side of an entitlement-read run.
    package struct ServerFigures: Codable, Sendable {
        /// Customers the answer cache may hold (0: off).
        package var cacheCapacity: Int
        /// Reads answered from the cache and from the ledger, over both runs.
        package var cacheHits: Int
        package var cacheMisses: Int
        /// Notifications applied while the clients read (each changed one customer's answer).
        package var writesDuringReads: Int
        package var writeRate: Double
        /// Renewal notifications applied before the reads (`--renewals`).
        package var renewalNotificationsSeeded: Int
        /// Whether each purchase carried the customer's app account token (`--app-account-tokens`).
        package var appAccountTokens: Bool
        /// Consumable purchases each customer made besides (`--consumables`).
        package var consumablesPerCustomer: Int
        /// A cache miss taken apart, without HTTP, one read at a time.
        package var missPath: MissPath
        /// PostgreSQL only: customers read per statement on the first instance, over both runs (`Batcher`).
        package var customersPerStatement: Double? = nil
    }

    /// The average time of each part of answering a customer from the ledger.
    package struct MissPath: Codable, Sendable {
        /// `LedgerStore.entitlementLedger(for:environment:)`: the hand-off to a pooled SQLite connection and back, a
        /// read transaction, its queries, and decoding the stored records it needs.
        package var ledgerReadMicroseconds: Double
        /// `EntitlementEngine.state` alone.
        package var entitlementStateMicroseconds: Double
        /// The whole answer from the loaded ledger: the state again, the subscriptions view, the next change and the
        /// JSON encoding.
        package var answerMicroseconds: Double
    }

    /// Posts `count` distinct notifications (one-time purchases and subscriptions, signed by an Apple-shaped test
    /// CA) to a fresh server.
    package static func ingest(count: Int, concurrency: Int, storage: Storage = .sqlite) async throws -> Result {
        let bodies = try makeNotifications(count: count * 3 / 2 + 10)
        return try await withServer(storage: storage) { ports, _, store, description in
            let send: @Sendable (LoadConnection, String) async throws -> UInt = { connection, body in
                try await connection.send(
                    .POST, "/appstore/notifications", headers: [("Content-Type", "application/json")], body: ByteBuffer(string: body))
            }
            let sqlite = store as? SQLiteLedgerStore
            let empty = try await sqlite?.usedBytes() ?? 0
            let full = try await drive(Array(bodies.prefix(count)), ports: ports, concurrency: concurrency, rate: nil, send)
            let half = try await drive(
                Array(bodies.dropFirst(count).prefix(count / 2)), ports: ports, concurrency: concurrency, rate: full.throughput / 2, send)
            var result = Result(benchmark: "ingest", storage: description, fullSpeed: full, halfRate: half)
            let applied = full.requests + half.requests - full.failures - half.failures
            if let sqlite, applied > 0 { result.ledgerBytesPerNotification = (try await sqlite.usedBytes() - empty) / applied }
            result.notificationsPerCommit = (store as? PostgresLedgerStore)?.notificationBatcher.meanBatchSize
            return result
        }
    }

    // MARK: - Set-up

    /// The tests' App Store (``TestAppStore``): its authority signs, the benchmark server trusts its root.
    static var authority: TestCertificateAuthority { TestAppStore.authority }

    static func engine() throws -> LifecycleEngine {
        try TestAppStore.engine(now: Date())
    }

    static func makeNotifications(count: Int) throws -> [String] {
        var engine = try engine()
        var index = 0
        while engine.state.notifications.count < count {
            let customer = "customer-\(index)"
            try engine.createCustomer(id: customer)
            _ = try engine.purchase(.init(customerId: customer, productId: index % 2 == 0 ? "coins.100" : "pro.monthly"))
            index += 1
        }
        return engine.state.notifications.prefix(count).map { #"{"signedPayload":"\#($0.signedPayload)"}"# }
    }

    /// What the benchmark server's products grant.
    static let entitlementConfiguration = EntitlementConfiguration(subscriptionLevels: ["pro.monthly": 2])

    /// Where a benchmark's ledger lives: a temporary SQLite file (the default), or a new database on a PostgreSQL
    /// server (`--database postgres://…`, created for the run and dropped after it) shared by `instances` servers.
    package struct Storage: Sendable {
        package var postgres: String?
        package var instances: Int

        package init(postgres: String? = nil, instances: Int = 1) {
            self.postgres = postgres
            self.instances = max(1, instances)
        }

        package static let sqlite = Storage()
    }

    /// `instances` servers on one ledger on loopback ports, trusting the benchmark CA; `body` gets their ports, the
    /// API key and the first one's store, and the storage's description for the result.
    static func withServer<T: Sendable>(
        storage: Storage = .sqlite, apiKey: String? = nil, cacheCapacity: Int = 10_000, exporter: MetricsExporter = MetricsExporter(),
        webhooks: [ServerConfiguration.WebhookEndpoint] = [], outbox: Bool = true,
        _ body: @Sendable @escaping (_ ports: [Int], _ apiKey: String, _ store: any LedgerStore, _ description: String) async throws -> T
    ) async throws -> T {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("storekeeper-bench-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let rootFile = directory.appendingPathComponent("root.pem")
        try authority.rootCertificate.serializeAsPEM().pemString.write(to: rootFile, atomically: true, encoding: .utf8)
        let key = apiKey ?? UUID().uuidString
        let configuration = ServerConfiguration(
            apps: [.init(bundleId: "com.example.storekeeper", appAppleId: 6_450_000_001, environments: [.sandbox], trustedRoots: [rootFile.path])],
            entitlements: entitlementConfiguration,
            apiKeys: [
                .init(name: "bench", sha256: ServerConfiguration.hash(apiKey: key), scope: .app, bundleId: "com.example.storekeeper"),
                // `bench support`'s key: the bench key with `.support` appended.
                .init(name: "bench-support", sha256: ServerConfiguration.hash(apiKey: key + ".support"), scope: .support, bundleId: nil),
            ],
            customerCache: .init(capacity: cacheCapacity), webhooks: webhooks
        )
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        var stores: [any LedgerStore] = []
        var description = "SQLite (WAL, synchronous=FULL), temporary file"
        var created: PostgresDatabaseURL? = nil
        if let postgres = storage.postgres {
            let url = try await PostgresDatabaseURL(postgres).creatingDatabase(named: "storekeeper_bench_" + UUID().uuidString.prefix(8).lowercased())
            created = url
            for _ in 0..<storage.instances { stores.append(try await PostgresLedgerStore.open(url, logger: logger)) }
            let server = try await (stores[0] as! PostgresLedgerStore).serverDescription()
            description =
                "\(server), \(storage.instances) instance\(storage.instances == 1 ? "" : "s") on one database (pool_size \(url.poolSize) each)"
        } else {
            stores = [try SQLiteLedgerStore(path: directory.appendingPathComponent("bench.sqlite").path)]
        }
        for store in stores { store.outbox.isEnabled = outbox }
        try await WebhookDeliveryService.register(webhooks, in: stores[0])
        let ports = AsyncStream<Int>.makeStream()
        let apps = try stores.map { store in
            StorekeeperApplication.buildApplication(
                store: store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0, logger: logger,
                exporter: exporter, onServerRunning: { port in ports.continuation.yield(port) }
            )
        }
        let store = stores[0]
        let result = try await withThrowingTaskGroup(of: T?.self) { group in
            for app in apps {
                group.addTask {
                    try await app.runService(gracefulShutdownSignals: [])
                    return nil
                }
            }
            var iterator = ports.stream.makeAsyncIterator()
            var running: [Int] = []
            while running.count < apps.count {
                guard let port = await iterator.next() else { throw VerifyBenchmark.BenchmarkError(message: "a server did not start") }
                running.append(port)
            }
            let result = try await body(running, key, store, description)
            group.cancelAll()
            return result
        }
        for store in stores { await (store as? PostgresLedgerStore)?.close() }
        if let created { try? await created.droppingDatabase() }
        return result
    }

    // MARK: - Load

    /// Sends every item with `concurrency` workers, each on its own keep-alive connection (optionally paced at
    /// `rate` per second); latencies per request. A request fails on a transport error or a status other than 200.
    static func drive<Item: Sendable>(
        _ items: [Item],
        ports: [Int],
        concurrency: Int,
        rate: Double?,
        _ send: @Sendable @escaping (LoadConnection, Item) async throws -> UInt
    ) async throws -> Run {
        var connections: [LoadConnection] = []
        // Worker i talks to server i modulo their number (several instances behind a balancer).
        for worker in 0..<concurrency { connections.append(try await LoadConnection.connect(host: "127.0.0.1", port: ports[worker % ports.count])) }
        let clock = ContinuousClock()
        let start = clock.now
        let results = try await withThrowingTaskGroup(of: [(Double, Bool)].self) { group in
            for (worker, initial) in connections.enumerated() {
                group.addTask {
                    var connection = initial
                    var measured: [(Double, Bool)] = []
                    measured.reserveCapacity(items.count / concurrency + 1)
                    var index = worker
                    while index < items.count {
                        if let rate {
                            let due = start + .milliseconds(Int64(Double(index) / rate * 1000))
                            if due > clock.now { try await Task.sleep(until: due, clock: .continuous) }
                        }
                        let began = clock.now
                        var ok = true
                        do {
                            ok = try await send(connection, items[index]) == 200
                        } catch {
                            ok = false
                            await connection.close()
                            connection = try await LoadConnection.connect(host: "127.0.0.1", port: ports[worker % ports.count])
                        }
                        measured.append(((clock.now - began) / .milliseconds(1), ok))
                        index += concurrency
                    }
                    await connection.close()
                    return measured
                }
            }
            var all: [(Double, Bool)] = []
            for try await part in group { all += part }
            return all
        }
        let seconds = (clock.now - start) / .seconds(1)
        let latencies = results.map(\.0).sorted()
        func percentile(_ p: Double) -> Double {
            guard !latencies.isEmpty else { return 0 }
            return (latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] * 100).rounded() / 100
        }
        return Run(
            requests: items.count, concurrency: concurrency, targetRate: rate.map { ($0 * 10).rounded() / 10 },
            seconds: (seconds * 100).rounded() / 100, throughput: (Double(items.count) / seconds).rounded(),
            p50Milliseconds: percentile(0.5), p99Milliseconds: percentile(0.99), maxMilliseconds: percentile(1),
            failures: results.filter { !$0.1 }.count
        )
    }
}
