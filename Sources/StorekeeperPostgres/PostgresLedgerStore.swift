package import AppStoreModels
package import AppStoreSigning
package import Foundation
package import Logging
import PostgresNIO
package import StorekeeperCore
import Synchronization

/// The ledger on PostgreSQL, for several `storekeeper serve` instances sharing one database (postgres-nio, no ORM).
///
/// The rules are Core's (`LedgerUnitOfWork`); this store runs their steps in a transaction
/// (`PostgresWriteTransaction` says how the database keeps concurrent writers correct). A write that fails with a
/// serialization failure, a deadlock, or a connection lost before the commit was confirmed is run again from the start
/// (every unit of work is idempotent: a notification applied twice is a duplicate, a submission or a snapshot applied
/// twice changes nothing), so a transient failure never loses a notification. After each commit the customers the
/// write may have changed are announced on `changes` and, through `NOTIFY` in the same transaction (delivered at
/// commit), to every other instance, whose `PostgresChangeListener` announces them on its own feed.
///
/// Signed data is stored as `StoredJWS` parts with each distinct header once, as in SQLite.
package final class PostgresLedgerStore: LedgerStore {
    /// The connections (a postgres-nio client, renewed when the database comes back after an outage).
    let pool: PostgresPool
    let listener: PostgresChangeListener
    package let changes: LedgerChangeFeed
    package let outbox = OutboxSettings()
    package let eventsAppended = EventSignal()
    /// Gives events their IDs (sortable; monotonic within this process).
    let eventIDs = EventIDGenerator()
    package var databaseKind: String { "postgresql" }
    /// The schema migrations this open applied, oldest first (empty when the database was up to date).
    package let migrationsApplied: [String]
    /// Where the database is (without its password).
    package let url: PostgresDatabaseURL
    let headers = PostgresHeaders()
    /// Bounds every operation's wait for a connection (`connect_timeout`).
    let checkoutWatch: PostgresCheckoutWatch
    /// Whether ``close()`` ran.
    private let closed = Mutex(false)
    let logger: Logger
    /// Batches and retries, counted for `/metrics`.
    let metrics: StorekeeperMetrics
    /// A test seam that runs inside write transactions at named points (throwing from it rolls the write back), and
    /// before each statement of customer reads with `read <customer ID>` for each of its customers.
    let unsafeFaultInjection: (@Sendable (String) throws -> Void)?
    /// The channel on which instances announce their commits.
    static let channel = "storekeeper_ledger_changes"
    let retries = Mutex<Int>(0)
    /// The database's own failures of writes, for `/health` (``checkHealth()``).
    package let writeFaults = WriteFaults()
    /// How many live notifications wait, while a batch is being written, before another writer starts
    /// (`Batcher/gathering`): the value that ran fastest, with the least of PostgreSQL's CPU per notification
    /// (Benchmarks/History.md, tenth round). Customer reads do not gather: their cost is Storekeeper's HTTP side more
    /// than the database, so gathering them did not make them faster.
    static let writeGathering = 6
    /// Live notifications, applied in batches under load.
    package let notificationBatcher: Batcher<VerifiedNotification, ApplyOutcome>
    /// Customer reads for entitlements, read in batches under load.
    package let readBatcher: Batcher<CustomerScope, Ledger>
    /// How many times a write was run again after a transient failure (a deadlock, a serialization failure, a lost
    /// connection), since this store was opened.
    package var writesRetried: Int { retries.withLock { $0 } }
    /// Connections checked out from postgres-nio's pool since this store was opened: one per connection worker started
    /// (`PostgresPool`), not one per operation.
    package var connectionCheckouts: Int { pool.checkouts }

    private init(
        pool: PostgresPool, listener: PostgresChangeListener, changes: LedgerChangeFeed,
        migrationsApplied: [String], url: PostgresDatabaseURL, logger: Logger, metrics: StorekeeperMetrics,
        unsafeFaultInjection: (@Sendable (String) throws -> Void)?
    ) {
        self.metrics = metrics
        self.pool = pool
        self.listener = listener
        self.changes = changes
        self.migrationsApplied = migrationsApplied
        self.url = url
        self.logger = logger
        self.unsafeFaultInjection = unsafeFaultInjection
        self.notificationBatcher = Batcher(workers: url.writeConcurrency, maximumBatch: url.writeBatch, gathering: Self.writeGathering)
        self.readBatcher = Batcher(workers: url.readConcurrency, maximumBatch: url.readBatch)
        self.checkoutWatch = PostgresCheckoutWatch(timeout: url.connectTimeout)
        checkoutWatch.start()
    }

    /// Connects, migrates the schema (once, under an advisory lock, whatever the number of instances starting) and
    /// starts listening for other instances' commits. Call ``close()`` when done.
    package static func open(
        _ url: PostgresDatabaseURL, logger: Logger = Logger(label: "storekeeper.postgres"), metrics: StorekeeperMetrics = .discarded,
        unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil
    ) async throws(StorageError) -> PostgresLedgerStore {
        let applied: [String]
        do {
            // One connection first: it says at once why the database cannot be reached (the pool would retry
            // without end), and migrates.
            let connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(), id: 0, logger: logger)
            do {
                applied = try await PostgresSchema.migrate(connection, logger: logger)
                try? await connection.close()
            } catch {
                try? await connection.close()
                throw error
            }
        } catch let error as StorageError {
            throw StorageError("cannot open the PostgreSQL database \(url.redacted): \(error.message)")
        } catch {
            throw StorageError("cannot open the PostgreSQL database \(url.redacted): \(Self.describe(error))", underlying: error)
        }
        let pool = PostgresPool(configuration: try url.clientConfiguration(), probe: try url.connectionConfiguration(), logger: logger)
        do {
            let changes = LedgerChangeFeed()
            let listener = PostgresChangeListener(pool: pool, channel: channel, feed: changes, logger: logger)
            try await listener.start()
            return PostgresLedgerStore(
                pool: pool, listener: listener, changes: changes, migrationsApplied: applied, url: url,
                logger: logger, metrics: metrics, unsafeFaultInjection: unsafeFaultInjection
            )
        } catch {
            await pool.close()
            if let error = error as? StorageError { throw StorageError("cannot open the PostgreSQL database \(url.redacted): \(error.message)") }
            throw StorageError("cannot open the PostgreSQL database \(url.redacted): \(Self.describe(error))", underlying: error)
        }
    }

    /// Stops listening and closes every connection, in that order; once, however often called.
    package func close() async {
        guard
            closed.withLock({ closed in
                defer { closed = true }
                return !closed
            })
        else { return }
        await listener.stop()
        checkoutWatch.stop()
        await pool.close()
    }

    deinit {
        listener.cancel()
        checkoutWatch.stop()
        pool.cancel()
    }

    // MARK: - Writes

    package func appAccountToken(
        for customerId: String, bundleId: String, environment: AppStoreEnvironment, renew: Bool
    ) async throws(StorageError)
        -> LowercaseUUID
    {
        try await write { transaction in
            let connection = transaction.connection
            // The customer's lock first (the outbox's and the erasure's): two instances issuing at once take turns, and
            // the second finds the first's token; an erasure in progress finishes before a token is read or made.
            var locks = PostgresBindings(capacity: 1)
            locks.append([
                PostgresWriteTransaction.lockKey(customer: CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId))
            ])
            for try await _ in try await connection.run(LockStatement.self, locks) {}
            if !renew {
                var issued: String?
                for try await token in try await connection.run(
                    """
                    SELECT token FROM issued_tokens WHERE bundle_id = \(bundleId) AND environment = \(environment.rawValue) AND customer_id = \(customerId)
                    """
                ).decode(String.self) { issued = token }
                if let issued, let token = LowercaseUUID(uuidString: issued) { return (token, []) }
            }
            while true {
                // A random UUID another customer already owns is as good as impossible; drawn again all the same.
                let token = LowercaseUUID(UUID())
                var inserted = false
                for try await _ in try await connection.run(
                    """
                    INSERT INTO token_owners (bundle_id, environment, token, customer_id)
                    VALUES (\(bundleId), \(environment.rawValue), \(token.description), \(customerId))
                    ON CONFLICT DO NOTHING RETURNING 1
                    """
                ).decode(Int32.self) { inserted = true }
                guard inserted else { continue }
                try await connection.execute(
                    """
                    INSERT INTO issued_tokens (bundle_id, environment, customer_id, token)
                    VALUES (\(bundleId), \(environment.rawValue), \(customerId), \(token.description))
                    ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE SET token = excluded.token, issued_at = now()
                    """)
                // The customer is known from now on (a cached "unknown customer" answer is stale, on every instance).
                return (token, [customerId])
            }
        }
    }

    /// Notifications arriving together are applied together (`Batcher`): one that arrives while no writer is
    /// busy is applied at once, alone; under load, the next free writer applies all that wait in one transaction
    /// (``LedgerUnitOfWork/applyingTogether(_:)``), which costs about what one notification alone costs, and another
    /// writer starts only once ``writeGathering`` wait, or one has waited `Batcher/longestWait`.
    package func apply(_ notification: VerifiedNotification) async throws(StorageError) -> ApplyOutcome {
        try await notificationBatcher.submit(notification) { batch in
            self.metrics.batch(kind: "notifications", size: batch.count)
            return await self.applyTogether(batch)
        }
    }

    /// Applies a batch in one transaction; if that fails in a way one notification may have caused (see
    /// ``mayBeOneRequestsFault(_:)``; ``write(_:)`` retries transient failures), each notification alone, at once, so
    /// that one notification the database refuses fails only its own request.
    func applyTogether(_ notifications: [VerifiedNotification]) async -> [Result<ApplyOutcome, StorageError>] {
        do throws(StorageError) {
            if notifications.count == 1 { return [.success(try await applyAlone(notifications[0]))] }
            return try await write { transaction in
                try await LedgerUnitOfWork.applyingTogether(notifications).run(in: transaction)
            }.map { .success($0) }
        } catch {
            // A statement timeout counts: a write waits on its families' locks, and one family's lock held by a stuck
            // client would fail the whole batch, where the others, alone (and at once), go through.
            guard notifications.count > 1, Self.mayBeOneRequestsFault(error, timeoutIncluded: true) else {
                return notifications.map { _ in .failure(error) }
            }
            logger.notice(
                "a batch of notifications failed; applying each alone",
                metadata: [
                    "error": .string(error.message), "batch": .stringConvertible(notifications.count),
                ])
            return await Batcher.eachAlone(notifications) { notification throws(StorageError) in try await self.applyAlone(notification) }
        }
    }

    private func applyAlone(_ notification: VerifiedNotification) async throws(StorageError) -> ApplyOutcome {
        try await write { transaction in try await LedgerUnitOfWork.applying(notification).run(in: transaction) }
    }

    package func applyRecovered(_ notifications: [VerifiedNotification], watermark: RecoveryWatermark?) async throws(StorageError) -> [ApplyOutcome] {
        try await write { transaction in
            try await LedgerUnitOfWork.applyingRecovered(notifications, watermark: watermark).run(in: transaction)
        }
    }

    package func applySnapshot(_ snapshot: AppStoreSnapshot) async throws(StorageError) -> Int {
        try await write { transaction in try await LedgerUnitOfWork.applyingSnapshot(snapshot).run(in: transaction) }
    }

    package func submit(
        _ transaction: VerifiedSignedData<TransactionInfo>, customerId: String, policy: RestorePolicy
    ) async throws(StorageError) -> SubmissionOutcome {
        try await write { write in try await LedgerUnitOfWork.submitting(transaction, customerId: customerId, policy: policy).run(in: write) }
    }

    package func recordRefused(_ refusal: RefusedNotification, keeping limit: Int) async throws(StorageError) {
        let _: Int = try await write { transaction in
            try await self.insertRefused(refusal, on: transaction.connection)
            // Ids only grow (with gaps where inserts rolled back), so at most `limit` rows are within `limit` of the largest.
            try await transaction.connection.execute(
                "DELETE FROM refused_notifications WHERE id <= (SELECT max(id) FROM refused_notifications) - \(max(0, limit))"
            )
            return (0, [])
        }
    }

    /// Keeps the record of a refused request (also what ``importPage(_:)`` copies).
    func insertRefused(_ refusal: RefusedNotification, on connection: PostgresConnection) async throws {
        let claims: String?
        do {
            claims = try refusal.claims.map { String(decoding: try AppStoreJSON.makeEncoder().encode($0), as: UTF8.self) }
        } catch {
            throw StorageError("cannot encode a refused notification's claims: \(error)")
        }
        try await connection.execute(
            """
            INSERT INTO refused_notifications (received_at, code, message, status, size, sha256, prefix, claims)
            VALUES (\(refusal.receivedAt.epochMilliseconds), \(refusal.code), \(refusal.message), \(refusal.status),
                \(refusal.size), \(refusal.sha256), \(refusal.prefix), \(claims))
            """)
    }

    package func pruneRawPayloads(receivedBefore date: Date) async throws(StorageError) -> Int {
        try await write { transaction in
            // One statement over every old notification: the first run over a year's backlog may take longer than a
            // read or a write is allowed (`statement_timeout`), and would then never get through.
            try await transaction.connection.execute("SET LOCAL statement_timeout = 0")
            var count = 0
            for try await _ in try await transaction.connection.run(
                """
                UPDATE notifications SET jws_header = NULL, jws_payload = NULL, jws_signature = NULL, jws_raw = NULL
                WHERE received_at < \(date.epochMilliseconds) AND (jws_payload IS NOT NULL OR jws_raw IS NOT NULL)
                RETURNING 1
                """
            ).decode(Int.self) { count += 1 }
            return (count, [])
        }
    }

    // MARK: - Reads

    package func customerExists(_ customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Bool {
        try await read { connection in
            var exists = false
            for try await value in try await connection.run(
                """
                SELECT EXISTS (SELECT 1 FROM token_owners WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment.rawValue))
                    OR EXISTS (SELECT 1 FROM customer_links l JOIN transactions t
                        ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
                        WHERE l.customer_id = \(customerId) AND l.environment = \(environment.rawValue) AND t.bundle_id = \(bundleId))
                    OR EXISTS (SELECT 1 FROM promotional_grants
                        WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment.rawValue))
                """
            ).decode(Bool.self) { exists = value }
            return exists
        }
    }

    package func ledger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        let read = CustomerScope(customerId: customerId, bundleId: bundleId, environment: environment)
        return try await self.read { connection in try await self.loadCustomers(connection, [read], entitlementsOnly: false)[0] }
    }

    /// Customers read together are read together (`Batcher`), the way notifications are applied: a read arriving
    /// while a reader is free runs at once, alone; under load, the next free reader reads all that wait in one
    /// statement, which costs PostgreSQL about what one read alone costs (its start-up work, not its index look-ups,
    /// is most of a read's cost).
    package func entitlementLedger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await readBatcher.submit(CustomerScope(customerId: customerId, bundleId: bundleId, environment: environment)) { reads in
            self.metrics.batch(kind: "customer_reads", size: reads.count)
            return await self.readTogether(reads)
        }
    }

    /// Reads a batch in one statement; if that fails in a way that may be one customer's (see
    /// ``mayBeOneRequestsFault(_:)``), each read alone, at once, so that one customer whose rows cannot be read fails only
    /// its own request.
    func readTogether(_ reads: [CustomerScope]) async -> [Result<Ledger, StorageError>] {
        do throws(StorageError) {
            return try await read { connection in try await self.loadCustomers(connection, reads, entitlementsOnly: true) }.map { .success($0) }
        } catch {
            guard reads.count > 1, Self.mayBeOneRequestsFault(error) else { return reads.map { _ in .failure(error) } }
            logger.notice(
                "a batch of customer reads failed; reading each alone",
                metadata: [
                    "error": .string(error.message), "batch": .stringConvertible(reads.count),
                ])
            return await Batcher.eachAlone(reads) { read throws(StorageError) in
                try await self.read { connection in try await self.loadCustomers(connection, [read], entitlementsOnly: true)[0] }
            }
        }
    }

    /// Whether a failed batch (customer reads, notifications) may have failed because of one of its requests: the
    /// database refused a statement with a non-transient error, a row could not be decoded, or the store's own checks
    /// failed. Not when the database could not be reached, the connection was lost or the pool gave none: running
    /// each alone would fail each again, and multiply the load on a database already in trouble. A statement that ran
    /// past `statement_timeout` (SQLSTATE 57014) counts only when `timeoutIncluded`: a read takes no lock, so its
    /// timeout says the database is overloaded, where a write may have waited for one request's lock.
    static func mayBeOneRequestsFault(_ error: StorageError, timeoutIncluded: Bool = false) -> Bool {
        guard let underlying = error.underlying else { return true }
        let cause = Self.cause(of: underlying)
        if cause is PostgresDecodingError { return true }
        guard let error = cause as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        return !isTransient(error) && (timeoutIncluded || state != "57014")
    }

    package func ledger(families: [LedgerKey]) async throws(StorageError) -> Ledger {
        try await read { connection in
            var ledger = Ledger()
            try await self.loadFamilies(connection, nil, families, into: &ledger)
            return ledger
        }
    }

    package func subscriptionFamilies(bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> [String] {
        try await read { connection in
            var originals: [String] = []
            for try await original in try await connection.run(
                """
                SELECT original_transaction_id FROM subscriptions WHERE environment = \(environment.rawValue) AND bundle_id = \(bundleId)
                ORDER BY original_transaction_id
                """
            ).decode(String.self) { originals.append(original) }
            return originals
        }
    }

    package func containsNotification(_ uuid: String) async throws(StorageError) -> Bool {
        try await read { connection in
            var found = false
            // A claimed row not yet committed is not seen; one committed is always complete.
            for try await _ in try await connection.run("SELECT 1 FROM notifications WHERE uuid = \(uuid)").decode(Int.self) { found = true }
            return found
        }
    }

    package func recoveryWatermark(_ app: VerifierKey) async throws(StorageError) -> Date? {
        try await read { connection in
            var watermark: Date? = nil
            for try await value in try await connection.run(
                """
                SELECT watermark FROM recovery_watermarks WHERE bundle_id = \(app.bundleId) AND environment = \(app.environment.rawValue)
                """
            ).decode(Int64.self) { watermark = Date(epochMilliseconds: value) }
            return watermark
        }
    }

    package func rawPayload(notificationUUID: String) async throws(StorageError) -> String? {
        try await read { connection in
            var columns: PostgresHeaders.Columns? = nil
            for try await (header, payload, signature, raw) in try await connection.run(
                """
                SELECT jws_header, jws_payload, jws_signature, jws_raw FROM notifications WHERE uuid = \(notificationUUID)
                """
            ).decode((Int64?, Data?, Data?, String?).self) {
                columns = PostgresHeaders.Columns(header: header, payload: payload, signature: signature, raw: raw)
            }
            guard let columns else { return nil }
            try await self.headers.load(self.headers.references(columns), connection, nil)
            return try self.headers.jws(columns, nil)
        }
    }

    package func notificationCounts() async throws(StorageError) -> [String: Int] {
        try await read { connection in
            var counts: [String: Int] = [:]
            for try await (outcome, count) in try await connection.run(
                "SELECT outcome, COUNT(*) FROM notifications GROUP BY outcome"
            ).decode((String, Int).self) { counts[outcome] = count }
            for try await count in try await connection.run("SELECT COUNT(*) FROM refused_notifications").decode(Int.self) {
                counts["rejected"] = count
            }
            return counts
        }
    }

    /// The server's version and the commit settings that decide durability, for benchmark reports.
    package func serverDescription() async throws(StorageError) -> String {
        try await read { connection in
            var parts: [String] = []
            for try await (version, synchronous, fsync) in try await connection.run(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')"
            ).decode((String, String, String).self) {
                parts = ["PostgreSQL \(version)", "synchronous_commit=\(synchronous)", "fsync=\(fsync)"]
            }
            return parts.joined(separator: ", ")
        }
    }

    /// Answers within 5 s: a database that is down makes the pool wait for a connection, which a load balancer's
    /// health check must not. Healthy when the database answers and this instance's writes are not failing
    /// (``WriteFaults``: a full disk refuses writes while `SELECT 1` still answers).
    package func checkHealth() async throws(StorageError) {
        let healthy: Result<Void, StorageError>? = await withTaskGroup(of: Result<Void, StorageError>?.self) { group in
            group.addTask {
                do throws(StorageError) {
                    try await self.read { connection in
                        for try await _ in try await connection.run("SELECT 1").decode(Int.self) {}
                    }
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        switch healthy {
        case .success:
            if let failure = writeFaults.failure() { throw StorageError(failure) }
        case .failure(let error): throw error
        case nil:
            pool.noteFailure()
            throw StorageError("the database did not answer within 5 s")
        }
    }
}
