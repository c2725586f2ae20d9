import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Logging
import MetricsTestKit
import PostgresNIO
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Synchronization
import Testing

@testable import StorekeeperPostgres

/// What only PostgreSQL has to prove: several instances (stores) on one database at once. The contract tests run
/// against it too (``Backend``).
@Suite("PostgreSQL store: several instances on one database", .needsPostgres, .dropsTestDatabases)
struct PostgresStoreTests {
    typealias H = SimulatorFixture

    /// Waits (up to 5 s) until some transaction of this test's database waits for an advisory lock. pg_locks shows the
    /// whole server's locks: only this database counts, other tests run beside it.
    static func waitUntilALockIsAwaited(_ connection: PostgresConnection) async throws {
        var waiting = false
        for _ in 0..<500 where !waiting {
            for try await count in try await connection.query(
                """
                SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """, logger: Logger(label: "test")
            ).decode(Int.self) { waiting = count > 0 }
            if !waiting { try await Task.sleep(for: .milliseconds(10)) }
        }
        try #require(waiting)
    }

    /// Opens `count` stores (instances) on one new database.
    static func instances(_ count: Int) async throws -> [PostgresLedgerStore] {
        let url = try await PostgresTestDatabase.create()
        var stores: [PostgresLedgerStore] = []
        for _ in 0..<count { stores.append(try await PostgresLedgerStore.open(url)) }
        return stores
    }

    @Test(
        "writes the server refuses for itself (a full disk, SQLSTATE 53100) make the health check fail, naming it, until one succeeds and a minute passes"
    )
    func writeFaultsInHealth() async throws {
        var harness = H()
        for customer in ["a", "b"] {
            try harness.engine.createCustomer(id: customer)
            _ = try harness.engine.purchase(.init(customerId: customer, productId: "pro.monthly"))
        }
        let notifications = try await harness.verifiedNotifications()
        let url = try await PostgresTestDatabase.create()
        let store = try await PostgresLedgerStore.open(url)
        try await store.checkHealth()
        // What PostgreSQL raises when its disk is full, from a trigger: reads still answer, writes fail.
        try await PostgresTestDatabase.withClient(url) { client in
            try await client.query(
                """
                CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END $$
                """)
            try await client.query("CREATE TRIGGER disk_full BEFORE INSERT ON notifications FOR EACH ROW EXECUTE FUNCTION disk_full()")
        }
        await #expect(throws: StorageError.self) { _ = try await store.apply(notifications[0]) }
        let failing = await #expect(throws: StorageError.self) { try await store.checkHealth() }
        #expect(failing?.message.contains("writes are failing: the last write failed, the latest ") == true, "\(String(describing: failing))")
        #expect(failing?.message.contains("No space left on device (SQLSTATE 53100)") == true, "\(String(describing: failing))")
        _ = try await PostgresTestDatabase.withClient(url) { client in try await client.query("DROP TRIGGER disk_full ON notifications") }
        #expect(try await store.apply(notifications[1]) == .applied)
        // Writes work again, and the fault is still told for a minute (a small write may fit where a large one did not).
        let recovered = await #expect(throws: StorageError.self) { try await store.checkHealth() }
        #expect(recovered?.message.contains("others have succeeded since") == true, "\(String(describing: recovered))")
        #expect(store.writeFaults.failure(at: Date().addingTimeInterval(61)) == nil)
        await store.close()
    }

    @Test("several instances starting together migrate the database once")
    func migrationsUnderLock() async throws {
        let url = try await PostgresTestDatabase.create()
        let stores = try await withThrowingTaskGroup(of: PostgresLedgerStore.self) { group in
            for _ in 0..<4 { group.addTask { try await PostgresLedgerStore.open(url) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        // Exactly one of them applied each migration; the others found the schema up to date.
        #expect(stores.filter { !$0.migrationsApplied.isEmpty }.count == 1)
        let rows = try await PostgresTestDatabase.withClient(url) { client in
            var ids: [String] = []
            for try await id in try await client.query("SELECT id FROM storekeeper_migrations").decode(String.self) { ids.append(id) }
            return ids
        }
        #expect(rows.count == Set(rows).count && !rows.isEmpty)
        for store in stores { await store.close() }
    }

    @Test("a database migrated by a newer Storekeeper is refused, naming the migrations it does not know")
    func newerDatabaseRefused() async throws {
        let url = try await PostgresTestDatabase.create()
        try await PostgresLedgerStore.open(url).close()
        try await PostgresTestDatabase.withClient(url) { client in
            _ = try await client.query("INSERT INTO storekeeper_migrations (id) VALUES ('v99: from the future')")
        }
        let error = await #expect(throws: StorageError.self) { try await PostgresLedgerStore.open(url) }
        #expect(error?.message.contains("v99: from the future") == true)
        #expect(error?.message.contains("newer Storekeeper") == true)
    }

    @Test("the same notifications applied by three instances at once, in random orders with duplicates, end as one writer in order")
    func concurrentWritersAgreeWithOneWriter() async throws {
        var harness = H()
        try await harness.play("subscriber-lifecycle")
        for index in 0..<20 {
            let customer = "customer-\(index)"
            try harness.engine.createCustomer(id: customer)
            _ = try harness.engine.purchase(.init(customerId: customer, productId: "pro.monthly", appAccountToken: LowercaseUUID(UUID())))
            _ = try harness.engine.purchase(.init(customerId: customer, productId: "coins.100"))
        }
        try harness.engine.advance(by: 70 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        let submissions = try await harness.appSubmissions()
        let customers = Set(submissions.map(\.1)).sorted()

        // The reference: one writer, in order.
        let reference = try SQLiteLedgerStore(path: TestFiles.directory.appendingPathComponent("ledger-\(UUID()).sqlite").path)
        for (transaction, customer) in submissions { _ = try await reference.submit(transaction, customerId: customer) }
        for notification in notifications { _ = try await reference.apply(notification) }

        let stores = try await Self.instances(3)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, (transaction, customer)) in submissions.enumerated() {
                group.addTask { _ = try await stores[index % stores.count].submit(transaction, customerId: customer) }
            }
            try await group.waitForAll()
        }
        let outcomes = Collected<ApplyOutcome>()
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Four writers per instance, each with every notification twice in its own random order.
            for writer in 0..<(stores.count * 4) {
                let store = stores[writer % stores.count]
                let order = (Array(notifications.indices) + Array(notifications.indices)).shuffled()
                group.addTask {
                    for index in order {
                        let outcome = try await store.apply(notifications[index])
                        outcomes.add(outcome)
                    }
                }
            }
            try await group.waitForAll()
        }
        // Each notification was applied (or recorded) exactly once; every other delivery was a duplicate.
        let all = outcomes.values
        #expect(all.filter { $0 != .duplicate }.count == notifications.count)
        #expect(try await stores[0].notificationCounts() == reference.notificationCounts())
        for customer in customers {
            let expected = try await reference.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
            for store in stores {
                let ledger = try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                #expect(Ledger.differences(ledger, expected).isEmpty, "\(customer): \(Ledger.differences(ledger, expected))")
            }
        }
        for store in stores { await store.close() }
    }

    @Test("notifications arriving together are applied in batches, each once, as one writer in order; one the database refuses fails alone")
    func batchedNotifications() async throws {
        var harness = H()
        for index in 0..<15 {
            try harness.engine.createCustomer(id: "b\(index)")
            _ = try harness.engine.purchase(.init(customerId: "b\(index)", productId: index % 3 == 0 ? "coins.100" : "pro.monthly"))
        }
        try harness.engine.advance(by: 65 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        let refused = notifications[notifications.count / 2].payload.notificationUUID
        let reference = try SQLiteLedgerStore(path: TestFiles.directory.appendingPathComponent("ledger-\(UUID()).sqlite").path)
        for notification in notifications where notification.payload.notificationUUID != refused { _ = try await reference.apply(notification) }

        // One writer: whatever arrives while it commits waits and goes in its next batch.
        var url = try await PostgresTestDatabase.create()
        url.writeConcurrency = 1
        let store = try await PostgresLedgerStore.open(
            url,
            unsafeFaultInjection: { point in
                if point == "notification \(refused)" { throw StorageError("refused by the test") }
            })
        let outcomes = await store.applyAllAtOnce((notifications + notifications).shuffled())
        let written = store.notificationBatcher.completed
        #expect(written.items == notifications.count * 2 && written.batches < written.items / 2, "\(written)")
        // The refused notification failed both times, alone; every other was applied once, then a duplicate.
        for (uuid, result) in outcomes where uuid == refused {
            #expect(throws: StorageError.self) { try result.get() }
        }
        let others = outcomes.filter { $0.0 != refused }
        #expect(others.allSatisfy { (try? $0.1.get()) != nil })
        #expect(others.filter { (try? $0.1.get()) != .duplicate }.count == notifications.count - 1)
        #expect(Set(others.filter { (try? $0.1.get()) != .duplicate }.map(\.0)).count == notifications.count - 1)
        #expect(try await store.containsNotification(refused) == false)
        #expect(try await store.notificationCounts() == reference.notificationCounts())
        for index in 0..<15 {
            let expected = try await reference.ledger(for: "b\(index)", bundleId: "com.example.storekeeper", environment: .sandbox)
            let ledger = try await store.ledger(for: "b\(index)", bundleId: "com.example.storekeeper", environment: .sandbox)
            #expect(Ledger.differences(ledger, expected).isEmpty, "b\(index): \(Ledger.differences(ledger, expected))")
        }
        await store.close()
    }

    @Test(
        "customer reads arriving together are read in batches, each the reader's own customer's ledger; one whose read fails fails alone; a batch failing outside the database fails at once"
    )
    func batchedReads() async throws {
        var harness = H()
        for index in 0..<12 {
            let customer = "r\(index)"
            try harness.engine.createCustomer(id: customer)
            let token = index % 2 == 0 ? LowercaseUUID(UUID()) : nil
            _ = try harness.engine.purchase(
                .init(customerId: customer, productId: index % 3 == 0 ? "unlock.lifetime" : "pro.monthly", appAccountToken: token))
            for _ in 0..<(index % 4) { _ = try harness.engine.purchase(.init(customerId: customer, productId: "coins.100", appAccountToken: token)) }
        }
        try harness.engine.advance(by: 65 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        let reference = try SQLiteLedgerStore(path: TestFiles.directory.appendingPathComponent("ledger-\(UUID()).sqlite").path)
        var url = try await PostgresTestDatabase.create()
        let writer = try await PostgresLedgerStore.open(url)
        for store in [reference, writer] as [any LedgerStore] {
            try await harness.submitAll(to: store)
            for notification in notifications { _ = try await store.apply(notification) }
        }
        await writer.close()

        // One reader: whatever arrives while it reads waits and goes in its next statement. Each customer is read four
        // times, besides customers nobody knows, another app and the other environment.
        url.readConcurrency = 1
        let failing = Mutex<String?>(nil)
        let unreachable = Mutex(false)
        let attempts = Mutex(0)
        let metrics = TestMetrics()
        let store = try await PostgresLedgerStore.open(
            url, metrics: StorekeeperMetrics(factory: metrics),
            unsafeFaultInjection: { point in
                if let customer = failing.withLock({ $0 }), point == "read \(customer)" { throw StorageError("refused by the test") }
                if point.hasPrefix("read "), unreachable.withLock({ $0 }) {
                    attempts.withLock { $0 += 1 }
                    throw CancellationError()
                }
            })
        var reads: [CustomerScope] = []
        for index in 0..<12 {
            for _ in 0..<4 { reads.append(CustomerScope(customerId: "r\(index)", bundleId: "com.example.storekeeper", environment: .sandbox)) }
        }
        reads += [
            CustomerScope(customerId: "nobody", bundleId: "com.example.storekeeper", environment: .sandbox),
            CustomerScope(customerId: "r2", bundleId: "com.other.app", environment: .sandbox),
            CustomerScope(customerId: "r2", bundleId: "com.example.storekeeper", environment: .production),
        ]
        // Every read at once, then each answer against SQLite's for the same customer, app and environment.
        func readAll(failing: String?) async throws {
            let answers = Collected<(CustomerScope, Result<Ledger, StorageError>)>()
            await withTaskGroup(of: Void.self) { group in
                for read in reads.shuffled() {
                    group.addTask {
                        do throws(StorageError) {
                            answers.add(
                                (
                                    read,
                                    .success(
                                        try await store.entitlementLedger(
                                            for: read.customerId, bundleId: read.bundleId, environment: read.environment))
                                ))
                        } catch {
                            answers.add((read, .failure(error)))
                        }
                    }
                }
            }
            #expect(answers.values.count == reads.count)
            for (read, result) in answers.values {
                if read.customerId == failing {
                    #expect(throws: StorageError.self) { try result.get() }
                    continue
                }
                let ledger = try result.get()
                let expected = try await reference.entitlementLedger(for: read.customerId, bundleId: read.bundleId, environment: read.environment)
                #expect(Ledger.differences(ledger, expected).isEmpty, "\(read): \(Ledger.differences(ledger, expected))")
                #expect(
                    ledger.consumableTotals == expected.consumableTotals && ledger.omittedTransactionTokens == expected.omittedTransactionTokens,
                    "\(read)")
            }
        }
        try await readAll(failing: nil)
        let statements = store.readBatcher.completed
        #expect(statements.items == reads.count && statements.batches < reads.count / 2, "\(statements)")
        // What /metrics shows an operator: the statements and the reads they held.
        let kind = [("kind", "customer_reads")]
        #expect(try metrics.expectCounter(StorekeeperMetrics.Name.databaseBatches, kind).totalValue == Int64(statements.batches))
        #expect(try metrics.expectCounter(StorekeeperMetrics.Name.databaseBatchedRequests, kind).totalValue == Int64(reads.count))
        // A customer whose read fails makes its batch fail: each read of the batch is then read alone, and only theirs fails.
        failing.withLock { $0 = "r5" }
        try await readAll(failing: "r5")
        failing.withLock { $0 = nil }
        // A batch that fails for a reason that is not one customer's (not the database's refusal of a row: here an error
        // from outside the database, as a lost connection is) fails every read of the batch at once, none read again alone.
        let before = store.readBatcher.completed
        unreachable.withLock { $0 = true }
        let failures = Collected<Bool>()
        await withTaskGroup(of: Void.self) { group in
            for read in reads {
                group.addTask {
                    let failed =
                        (try? await store.entitlementLedger(for: read.customerId, bundleId: read.bundleId, environment: read.environment)) == nil
                    failures.add(failed)
                }
            }
        }
        unreachable.withLock { $0 = false }
        let batches = store.readBatcher.completed.batches - before.batches
        #expect(failures.values.count == reads.count && failures.values.allSatisfy { $0 })
        #expect(batches < reads.count, "\(batches) batches: none held several reads")
        // The fault point is reached once per read of each batch's first statement, and never again for a read alone.
        #expect(attempts.withLock { $0 } == batches, "\(attempts.withLock { $0 }) attempts for \(batches) batches")
        // What the reads saw is each customer's own: r3 has three coin purchases counted, r4 a token it owns.
        let r3 = try await store.entitlementLedger(for: "r3", bundleId: "com.example.storekeeper", environment: .sandbox)
        #expect(r3.consumableTotals.values.map(\.purchases) == [3])
        let r4 = try await store.entitlementLedger(for: "r4", bundleId: "com.example.storekeeper", environment: .sandbox)
        #expect(r4.tokenOwners.count == 1 && r4.tokenOwners.values.allSatisfy { $0 == "r4" })
        await store.close()
    }

    @Test("pages of recovered notifications in opposite orders on two instances wait for each other: none deadlocks, none is lost")
    func oppositePagesDoNotDeadlock() async throws {
        var harness = H()
        for index in 0..<12 {
            try harness.engine.createCustomer(id: "c\(index)")
            _ = try harness.engine.purchase(.init(customerId: "c\(index)", productId: "pro.monthly"))
        }
        try harness.engine.advance(by: 100 * 86_400)
        let notifications = try await harness.verifiedNotifications()
        let stores = try await Self.instances(2)
        let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for round in 0..<6 {
                let page = round % 2 == 0 ? notifications : notifications.reversed()
                let store = stores[round % 2]
                group.addTask { _ = try await store.applyRecovered(page, watermark: RecoveryWatermark(app: app, date: Date())) }
            }
            try await group.waitForAll()
        }
        let counts = try await stores[1].notificationCounts()
        #expect(counts.values.reduce(0, +) == notifications.count)
        #expect(try await stores[0].recoveryWatermark(app) != nil)
        // Each page locks all its families first, in one order: the pages queue instead of deadlocking.
        #expect(stores.map(\.writesRetried) == [0, 0])
        for store in stores { await store.close() }
    }

    @Test("a write PostgreSQL aborts in a deadlock is run again by the store, and nothing is lost")
    func deadlocksAreRetried() async throws {
        let harness = try SimulatorFixture.monthlySubscribers(["a", "b"])
        let notifications = try await harness.verifiedNotifications()
        let url = try await PostgresTestDatabase.create()
        let metrics = TestMetrics()
        let store = try await PostgresLedgerStore.open(url, metrics: StorekeeperMetrics(factory: metrics))
        let keys = notifications.compactMap { $0.transaction?.payload }.map {
            PostgresWriteTransaction.lockKey(family: LedgerKey($0.environment!, $0.originalTransactionId))
        }
        try #require(keys.count == 2)
        let outcomes = try await PostgresTestDatabase.withClient(url) { client in
            // The store locks the page's two families in the order of their hashes: `first`, then `second`.
            var hashes: [(key: String, hash: Int64)] = []
            for key in keys {
                for try await hash in try await client.query("SELECT hashtextextended(\(key), 0)").decode(Int64.self) { hashes.append((key, hash)) }
            }
            let (first, second) = hashes[0].hash < hashes[1].hash ? (hashes[0].key, hashes[1].key) : (hashes[1].key, hashes[0].key)
            return try await client.withTransaction(logger: Logger(label: "test")) { connection -> Task<[ApplyOutcome], any Error> in
                // This transaction holds `second`: the store's page takes `first` and waits for `second`…
                _ = try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(second), 0))", logger: Logger(label: "test"))
                    .collect()
                let page = Task { try await store.applyRecovered(notifications, watermark: nil) }
                try await Self.waitUntilALockIsAwaited(connection)
                // …and this one now waits for `first`: a cycle. The store's transaction, waiting longest, is the one
                // PostgreSQL's deadlock check aborts (after `deadlock_timeout`); this one then gets `first` and commits.
                _ = try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(first), 0))", logger: Logger(label: "test")).collect()
                return page
            }.value
        }
        #expect(outcomes == [.applied, .applied])
        #expect(store.writesRetried >= 1)
        #expect(try metrics.expectCounter(StorekeeperMetrics.Name.databaseRetries).totalValue == Int64(store.writesRetried))
        #expect(try await store.notificationCounts()["applied"] == 2)
        await store.close()
    }

    @Test("two customers submitting purchases with one token on two instances at once: one gets it, the other is refused")
    func concurrentTokenClaims() async throws {
        var harness = H()
        var pairs: [(VerifiedSignedData<TransactionInfo>, VerifiedSignedData<TransactionInfo>)] = []
        for customer in ["alice", "eve"] { try harness.engine.createCustomer(id: customer) }
        for _ in 0..<10 {
            let token = LowercaseUUID(UUID())
            let first = try harness.engine.purchase(.init(customerId: "alice", productId: "coins.100", appAccountToken: token))
            let second = try harness.engine.purchase(.init(customerId: "eve", productId: "coins.100", appAccountToken: token))
            pairs.append(
                (
                    try await harness.verifier.verifyTransaction(first.signedTransaction),
                    try await harness.verifier.verifyTransaction(second.signedTransaction)
                ))
        }
        let stores = try await Self.instances(2)
        for (first, second) in pairs {
            async let alice = stores[0].submit(first, customerId: "alice")
            async let eve = stores[1].submit(second, customerId: "eve")
            let outcomes = try await [alice, eve]
            #expect(outcomes.filter { $0 == .linked }.count == 1, "\(outcomes)")
            #expect(outcomes.contains { if case .refused(let conflict) = $0 { conflict.kind == .appAccountToken } else { false } })
        }
        for store in stores { await store.close() }
    }

    @Test("a commit on one instance reaches the others' change feeds (their read caches)")
    func changesReachOtherInstances() async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let notification = try #require(try await harness.verifiedNotifications().first)
        let submission = try #require(try await harness.appSubmissions().first)
        let stores = try await Self.instances(2)
        let heard = Collected<LedgerChange>()
        stores[1].changes.subscribe { change in heard.add(change) }
        #expect(stores[1].changes.isComplete)
        _ = try await stores[0].submit(submission.0, customerId: "alice")
        _ = try await stores[0].apply(notification)
        let deadline = ContinuousClock.now + .seconds(10)
        while heard.values.count < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(heard.values == [.customers(["alice"]), .customers(["alice"])])
        for store in stores { await store.close() }
    }
}
