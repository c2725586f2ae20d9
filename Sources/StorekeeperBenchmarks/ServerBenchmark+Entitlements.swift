import AppStoreModels
import AppStoreSimulator
import Foundation
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperServer

extension ServerBenchmark {
    /// How `bench entitlements` runs.
    package struct EntitlementOptions: Sendable {
        /// Reads at full speed (half as many at half the rate).
        package var count = 20_000
        /// Customers in the ledger, read round-robin.
        package var customers = 1_000
        package var concurrency = 16
        /// Months of renewals each subscriber has before the reads (their notifications are applied while seeding), so
        /// that a read loads and decodes that many more transactions.
        package var renewals = 0
        /// Each purchase carries an app account token (one per customer), as when the app links purchases with
        /// `appAccountToken`; reads then also find the customer's subscriptions through their tokens.
        package var appAccountTokens = false
        /// Consumable purchases (`coins.100`) each customer makes besides, submitted by the app, so that a read
        /// loads that many more purchases.
        package var consumables = 0
        /// The server's customer-cache capacity (0: every read goes to the ledger).
        package var cacheCapacity = 10_000
        /// Notifications per second posted while the clients read; each turns one subscriber's auto-renew off or
        /// on, so the next read of that customer must see the change.
        package var writesPerSecond: Double = 0
        /// Before measuring, keep the seeded server up this long for another load generator, with this API key.
        package var externalLoad: (seconds: Double, apiKey: String)? = nil
        /// SQLite (the default), or PostgreSQL with one or more instances.
        package var storage = Storage.sqlite

        package init() {}
    }

    /// Customer reads answered from the cache and from the ledger so far, as the server's `/metrics` counts them.
    static func cacheCounts(_ exporter: MetricsExporter) -> (hits: Int, misses: Int) {
        var counts = (hits: 0, misses: 0)
        for line in exporter.render().split(separator: "\n") where line.hasPrefix(StorekeeperMetrics.Name.customerCache + "{") {
            let value = Int(line.split(separator: " ").last ?? "") ?? 0
            if line.contains(#"result="hit""#) { counts.hits = value } else if line.contains(#"result="miss""#) { counts.misses = value }
        }
        return counts
    }

    /// Reads customer states over HTTP from a server holding `options.customers` customers, at full speed and then
    /// at half that rate, optionally while notifications change some of them.
    package static func entitlements(_ options: EntitlementOptions) async throws -> Result {
        let exporter = MetricsExporter()
        let (purchases, history, changes) = try makeSubscribers(
            customers: options.customers, renewals: options.renewals, changes: options.writesPerSecond > 0,
            appAccountTokens: options.appAccountTokens, consumables: options.consumables
        )
        return try await withServer(
            storage: options.storage, apiKey: options.externalLoad?.apiKey, cacheCapacity: options.cacheCapacity, exporter: exporter
        ) { ports, key, store, description in
            let port = ports[0]
            let seeding = try await seed(purchases, history: history, ports: ports, apiKey: key)
            if let external = options.externalLoad {
                try? FileHandle.standardError.write(
                    contentsOf:
                        Data(
                            """
                            serving \(options.customers) customers at http://127.0.0.1:\(port) for \(external.seconds) s: \
                            GET /v1/customers/customer-<0..\(options.customers - 1)>?environment=Sandbox with the key in STOREKEEPER_BENCH_API_KEY

                            """.utf8))
                try await Task.sleep(for: .seconds(external.seconds))
            }
            let before = Self.cacheCounts(exporter)
            let ids = (0..<options.count).map { "customer-\($0 % options.customers)" }
            let send: @Sendable (LoadConnection, String) async throws -> UInt = { connection, id in
                try await connection.send(.GET, "/v1/customers/\(id)?environment=Sandbox", headers: [("Authorization", "Bearer \(key)")])
            }
            let (full, fullWrites) = try await withWrites(changes, rate: options.writesPerSecond, over: seeding) {
                try await drive(ids, ports: ports, concurrency: options.concurrency, rate: nil, send)
            }
            let (half, halfWrites) = try await withWrites(Array(changes.dropFirst(fullWrites)), rate: options.writesPerSecond, over: seeding) {
                try await drive(Array(ids.prefix(options.count / 2)), ports: ports, concurrency: options.concurrency, rate: full.throughput / 2, send)
            }
            await seeding.close()
            let after = Self.cacheCounts(exporter)
            let customersPerStatement = (store as? PostgresLedgerStore)?.readBatcher.meanBatchSize
            let missPath = try await measureMissPath(store: store, customers: options.customers)
            return Result(
                benchmark: "entitlements", storage: description, fullSpeed: full, halfRate: half,
                server: ServerFigures(
                    cacheCapacity: options.cacheCapacity, cacheHits: after.hits - before.hits, cacheMisses: after.misses - before.misses,
                    writesDuringReads: fullWrites + halfWrites, writeRate: options.writesPerSecond,
                    renewalNotificationsSeeded: history.count, appAccountTokens: options.appAccountTokens,
                    consumablesPerCustomer: options.consumables, missPath: missPath,
                    customersPerStatement: customersPerStatement
                )
            )
        }
    }

    /// Submits each purchase as the app does and posts the renewal notifications; the connection used, kept open.
    static func seed(_ purchases: [(String, String)], history: [String], ports: [Int], apiKey key: String) async throws -> LoadConnection {
        let seeding = try await LoadConnection.connect(host: "127.0.0.1", port: ports[0])
        for (customer, jws) in purchases {
            let status = try await seeding.send(
                .POST, "/v1/customers/\(customer)/transactions", headers: [("Authorization", "Bearer \(key)"), ("Content-Type", "application/json")],
                body: ByteBuffer(string: #"{"signedTransaction":"\#(jws)"}"#)
            )
            guard status == 200 else { throw VerifyBenchmark.BenchmarkError(message: "seeding \(customer) answered \(status)") }
        }
        let seeded = try await drive(history, ports: ports, concurrency: 8, rate: nil) { connection, body in
            try await connection.send(
                .POST, "/appstore/notifications", headers: [("Content-Type", "application/json")], body: ByteBuffer(string: body))
        }
        guard seeded.failures == 0 else { throw VerifyBenchmark.BenchmarkError(message: "\(seeded.failures) renewal notifications failed") }
        return seeding
    }

    /// The parts of answering from the ledger (a cache miss), timed one read at a time in this task, without HTTP,
    /// averaged over up to 2,000 customers read three times.
    static func measureMissPath(store: any LedgerStore, customers: Int) async throws -> MissPath {
        let configuration = entitlementConfiguration
        let engine = EntitlementEngine(configuration: configuration)
        let clock = ContinuousClock()
        var read = Duration.zero, state = Duration.zero, answer = Duration.zero
        let ids = (0..<min(customers, 2_000)).map { "customer-\($0)" }
        let now = Date()
        for _ in 0..<3 {
            for id in ids {
                let start = clock.now
                let ledger = try await store.entitlementLedger(for: id, bundleId: "com.example.storekeeper", environment: .sandbox)
                let loaded = clock.now
                _ = engine.state(of: id, in: ledger, environment: .sandbox, at: now)
                let computed = clock.now
                _ = CustomerAnswer(
                    for: id, in: ledger, bundleId: "com.example.storekeeper", environment: .sandbox, configuration: configuration, at: now
                ).json()
                read += loaded - start
                state += computed - loaded
                answer += clock.now - computed
            }
        }
        func perRead(_ total: Duration) -> Double { (total / .microseconds(1) / Double(ids.count * 3) * 10).rounded() / 10 }
        return MissPath(ledgerReadMicroseconds: perRead(read), entitlementStateMicroseconds: perRead(state), answerMicroseconds: perRead(answer))
    }

    /// Runs `reads` while posting `notifications` at `rate` per second on `connection`; how many were applied.
    static func withWrites(
        _ notifications: [String], rate: Double, over connection: LoadConnection, _ reads: @Sendable @escaping () async throws -> Run
    ) async throws -> (Run, Int) {
        guard rate > 0, !notifications.isEmpty else { return (try await reads(), 0) }
        return try await withThrowingTaskGroup(of: (Run?, Int).self) { group in
            group.addTask {
                let clock = ContinuousClock()
                let start = clock.now
                var applied = 0
                for (index, body) in notifications.enumerated() {
                    do {
                        try await Task.sleep(until: start + .milliseconds(Int64(Double(index) / rate * 1000)), clock: .continuous)
                    } catch {
                        break
                    }
                    let status = try await connection.send(
                        .POST, "/appstore/notifications", headers: [("Content-Type", "application/json")], body: ByteBuffer(string: body))
                    guard status == 200 else { throw VerifyBenchmark.BenchmarkError(message: "a notification during the reads answered \(status)") }
                    applied += 1
                }
                return (nil, applied)
            }
            let run = try await reads()
            group.cancelAll()
            var applied = 0
            for try await (_, count) in group { applied += count }
            return (run, applied)
        }
    }

    /// One purchase per customer (even: a lifetime unlock, odd: a monthly subscription; with the customer's app
    /// account token if asked) and `consumables` purchases of coins, as the app submits them; the notifications of `renewals` months of renewals; and, if
    /// asked, notifications that turn each subscriber's auto-renew off and then on again.
    /// `first`: the index of the first customer (a population built in parts, one engine each: their IDs do not collide,
    /// each customer taking fewer than 1,000 of each).
    static func makeSubscribers(
        customers: Int, renewals: Int, changes: Bool, appAccountTokens: Bool = false, consumables: Int = 0, first: Int = 0
    ) throws -> (purchases: [(String, String)], history: [String], changes: [String]) {
        var engine = try engine()
        engine.offsetIdentifiers(by: Int64(first) * 1_000)
        var purchases: [(String, String)] = []
        var subscriptions: [String] = []
        for index in first..<(first + customers) {
            let customer = "customer-\(index)"
            try engine.createCustomer(id: customer)
            let token = appAccountTokens ? LowercaseUUID(UUID()) : nil
            let result = try engine.purchase(
                .init(
                    customerId: customer, productId: index % 2 == 0 ? "unlock.lifetime" : "pro.monthly", appAccountToken: token
                ))
            purchases.append((customer, result.signedTransaction))
            for _ in 0..<consumables {
                let coins = try engine.purchase(.init(customerId: customer, productId: "coins.100", appAccountToken: token))
                purchases.append((customer, coins.signedTransaction))
            }
            if index % 2 == 1 { subscriptions.append(result.originalTransactionId) }
        }
        func bodies(since count: Int) -> [String] {
            engine.state.notifications.dropFirst(count).map { #"{"signedPayload":"\#($0.signedPayload)"}"# }
        }
        let renewed = engine.state.notifications.count
        for _ in 0..<renewals { try engine.advance(by: 30 * 86_400) }
        let history = bodies(since: renewed)
        guard changes else { return (purchases, history, []) }
        let changed = engine.state.notifications.count
        for enabled in [false, true] {
            for original in subscriptions { try engine.setAutoRenew(originalTransactionId: original, enabled: enabled) }
        }
        return (purchases, history, bodies(since: changed))
    }
}
