package import AppStoreModels
package import AppStoreSigning
package import Foundation
import GRDB
import NIOPosix
package import StorekeeperCore
import Synchronization

/// The embedded ledger: one SQLite file in WAL mode with `synchronous = FULL`, so an acknowledged notification
/// survives a crash or power loss. Schema migrations run when the store opens.
///
/// Each write loads the rows it touches into a `Ledger`, applies the same rules as the in-memory ledger, and
/// writes back what changed, all inside one write transaction (SQLite serializes writers), so the database and the
/// reference model cannot disagree. Signed data is stored as `StoredJWS` (each distinct protected header once, in
/// `jws_headers`), from which every raw JWS is given back byte for byte. The schema is in `SQLiteSchema.swift`.
package final class SQLiteLedgerStore: LedgerStore {
    let pool: DatabasePool
    /// The database file, for errors.
    package let path: String
    /// A test seam that runs inside write transactions at named points; throwing from it rolls the write back.
    let unsafeFaultInjection: (@Sendable (String) throws -> Void)?
    package let changes = LedgerChangeFeed()
    package let outbox = OutboxSettings()
    package let eventsAppended = EventSignal()
    /// Gives events their IDs (sortable; monotonic within this process).
    let eventIDs = EventIDGenerator()
    /// The database's own failures of writes, for `/health` (``checkHealth()``).
    package let writeFaults = WriteFaults()
    /// Group commit for live notifications: SQLite has one writer, so while it applies one notification, those that
    /// arrive wait and are applied together next, in one transaction and one commit (`Batcher`, one worker). A
    /// notification that arrives while the writer is free is applied at once, alone; each caller is answered once its
    /// batch has committed.
    package let notificationBatcher = Batcher<VerifiedNotification, ApplyOutcome>(workers: 1, maximumBatch: 64)
    package var databaseKind: String { "sqlite" }
    /// The schema migrations this open applied, oldest first (empty when the database was up to date).
    package let migrationsApplied: [String]
    /// The JWS headers the ledger holds, by reference.
    let headers = HeaderReferences()

    /// Opens (and creates or migrates) the database at `path`. With `creating` false, a database that holds no ledger
    /// yet (a new or empty file) is refused instead of made one; a SQLite database that is not a ledger (another
    /// program's, a simulator's) is always refused, never migrated.
    package convenience init(
        path: String, creating: Bool = true, unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil
    ) throws(StorageError) {
        try self.init(path: path, creating: creating, unsafeFaultInjection: unsafeFaultInjection, statementTrace: nil)
    }

    /// Opens the ledger at `path` to read only (`events list`, `events show`): nothing in it or its log changes
    /// (SQLite's readers mark what they read in the `-shm` index when they may), and the file need not be writable by
    /// this process. A ledger that needs migrating is refused, not migrated.
    package convenience init(readingOnly path: String) throws(StorageError) {
        try self.init(path: path, creating: false, unsafeFaultInjection: nil, statementTrace: nil, readOnly: true)
    }

    /// `statementTrace` sees the SQL of every statement any connection runs (tests check their query plans).
    init(
        path: String, creating: Bool = true, unsafeFaultInjection: (@Sendable (String) throws -> Void)?,
        statementTrace: (@Sendable (String) -> Void)?,
        readOnly: Bool = false
    ) throws(StorageError) {
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // A write-ahead log that grew past this (readers holding back checkpoints) is cut back after a checkpoint.
            try db.execute(sql: "PRAGMA journal_size_limit = 16777216")
            if let statementTrace { db.trace { event in if case .statement(let statement) = event { statementTrace(statement.sql) } } }
        }
        configuration.busyMode = .timeout(10)
        try readOnly ? Self.checkReadAccess(path) : Self.checkAccess(path)
        // What the file holds, read without changing it (opening it as the ledger turns on WAL, which rewrites its header).
        try Self.checkIsLedger(path, creating: creating)
        do {
            if !readOnly {
                try FileManager.default.createDirectory(at: URL(fileURLWithPath: path).deletingLastPathComponent(), withIntermediateDirectories: true)
            }
            // GRDB's pool makes and drops a table when the write-ahead log is empty (so that its readers can open),
            // which raises the ledger's schema version at each start. A connection held open across the pool's set-up
            // fills the log first with one frame that changes nothing (the header, its user version rewritten).
            let holder = readOnly ? nil : try Self.fillingEmptyLog(path, configuration: configuration)
            defer { try? holder?.close() }
            pool = try DatabasePool(path: path, configuration: configuration)
            // GRDB turns WAL on for the writer after `prepareDatabase` ran, and sets `synchronous = NORMAL` with it: a
            // commit would then be durable across a crash of the process but not of the machine (the last commits
            // before a power cut rolled back, acknowledged notifications lost). The writer is set back to FULL: its
            // log is synced at every commit.
            if !readOnly { try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") } }
            let migrator = Self.migrator
            let before = try pool.read { db in try migrator.appliedIdentifiers(db) }
            // A ledger migrated by a newer Storekeeper may hold data this version would misread or leave stale.
            let unknown = before.subtracting(migrator.migrations)
            guard unknown.isEmpty else { throw Self.migratedByNewerVersion(path, unknown: unknown) }
            guard !readOnly || before.count == migrator.migrations.count else { throw Self.needsMigrating(path) }
            try migrator.migrate(pool)
            migrationsApplied = migrator.migrations.filter { !before.contains($0) }
            if migrationsApplied.contains(Self.compactSignedDataMigration) && !before.isEmpty {
                // Signed data shrank to a fraction of its size; rewriting the file gives the space back.
                try pool.writeWithoutTransaction { db in try db.execute(sql: "VACUUM; PRAGMA wal_checkpoint(TRUNCATE)") }
            }
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError("cannot open the SQLite database at \(path): \(Self.explain(error, path: path) ?? "\(error)")", underlying: error)
        }
        self.path = path
        self.unsafeFaultInjection = unsafeFaultInjection
    }

    // MARK: - Writes

    package func appAccountToken(
        for customerId: String, bundleId: String, environment: AppStoreEnvironment, renew: Bool
    ) async throws(StorageError)
        -> LowercaseUUID
    {
        try await writeAnnouncing { db, _ in
            if !renew,
                let issued = try String.fetchOne(
                    db, sql: "SELECT token FROM issued_tokens WHERE bundle_id = ? AND environment = ? AND customer_id = ?",
                    arguments: [bundleId, environment.rawValue, customerId]), let token = LowercaseUUID(uuidString: issued)
            {
                return (token, [])
            }
            var token = LowercaseUUID(UUID())
            // A random UUID another customer already owns is as good as impossible; drawn again all the same.
            while try Row.fetchOne(
                db, sql: "SELECT 1 FROM token_owners WHERE bundle_id = ? AND environment = ? AND token = ?",
                arguments: [bundleId, environment.rawValue, token.description]) != nil
            {
                token = LowercaseUUID(UUID())
            }
            try db.execute(
                sql: "INSERT INTO token_owners (bundle_id, environment, token, customer_id) VALUES (?, ?, ?, ?)",
                arguments: [bundleId, environment.rawValue, token.description, customerId])
            try db.execute(
                sql: """
                    INSERT INTO issued_tokens (bundle_id, environment, customer_id, token, issued_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE SET token = excluded.token, issued_at = excluded.issued_at
                    """,
                arguments: [bundleId, environment.rawValue, customerId, token.description, Date().epochMilliseconds])
            // The customer is known from now on (a cached "unknown customer" answer is stale).
            return (token, [customerId])
        }
    }

    package func apply(_ notification: VerifiedNotification) async throws(StorageError) -> ApplyOutcome {
        try await notificationBatcher.submit(notification) { batch in await self.applyTogether(batch) }
    }

    /// Applies a batch in one transaction (``LedgerUnitOfWork/applyingTogether(_:)``: the same ledger as one after
    /// another); if that fails, each notification alone, so that one the database refuses fails only its own request.
    func applyTogether(_ notifications: [VerifiedNotification]) async -> [Result<ApplyOutcome, StorageError>] {
        if notifications.count > 1 {
            do throws(StorageError) {
                return try await writeAnnouncing { db, memo in
                    try LedgerUnitOfWork.applyRecovered(notifications, watermark: nil, in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
                }.map { .success($0) }
            } catch {}
        }
        var results: [Result<ApplyOutcome, StorageError>] = []
        for notification in notifications {
            do throws(StorageError) {
                results.append(
                    .success(
                        try await writeAnnouncing { db, memo in
                            try LedgerUnitOfWork.apply(notification, in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
                        }))
            } catch {
                results.append(.failure(error))
            }
        }
        return results
    }

    package func applyRecovered(_ notifications: [VerifiedNotification], watermark: RecoveryWatermark?) async throws(StorageError) -> [ApplyOutcome] {
        try await writeAnnouncing { db, memo in
            try LedgerUnitOfWork.applyRecovered(notifications, watermark: watermark, in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
        }
    }

    package func applySnapshot(_ snapshot: AppStoreSnapshot) async throws(StorageError) -> Int {
        try await writeAnnouncing { db, memo in
            try LedgerUnitOfWork.applySnapshot(snapshot, in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
        }
    }

    package func recordRefused(_ refusal: RefusedNotification, keeping limit: Int) async throws(StorageError) {
        try await write { db, _ in
            try Self.insertRefused(db, refusal)
            // Ids only grow, so the newest `limit` rows are those within `limit` of the largest.
            try db.cachedStatement(sql: "DELETE FROM refused_notifications WHERE id <= last_insert_rowid() - ?")
                .execute(arguments: [max(0, limit)])
        }
    }

    static func insertRefused(_ db: Database, _ refusal: RefusedNotification) throws {
        let claims = try refusal.claims.map { String(decoding: try AppStoreJSON.makeEncoder().encode($0), as: UTF8.self) }
        try db.cachedStatement(
            sql: """
                INSERT INTO refused_notifications (received_at, code, message, status, size, sha256, prefix, claims)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            refusal.receivedAt.epochMilliseconds, refusal.code, refusal.message, refusal.status, refusal.size,
            refusal.sha256, refusal.prefix, claims,
        ])
    }

    package func submit(
        _ transaction: VerifiedSignedData<TransactionInfo>, customerId: String, policy: RestorePolicy
    ) async throws(StorageError) -> SubmissionOutcome {
        try await writeAnnouncing { db, memo in
            try LedgerUnitOfWork.submit(
                transaction, customerId: customerId, policy: policy, in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
        }
    }

    package func pruneRawPayloads(receivedBefore date: Date) async throws(StorageError) -> Int {
        try await write { db, _ in
            try db.execute(
                sql: """
                    UPDATE notifications SET jws_header = NULL, jws_payload = NULL, jws_signature = NULL, jws_raw = NULL
                    WHERE received_at < ? AND (jws_payload IS NOT NULL OR jws_raw IS NOT NULL)
                    """,
                arguments: [date.epochMilliseconds]
            )
            return db.changesCount
        }
    }

    /// Leases live in the ledger (`job_leases`), so that every process on the file (a `serve`, a `recover`, a
    /// `reconcile --all`) sees them; expiry is judged by the machine's clock, the one clock they share.
    package func acquireLease(_ job: String, holder: String, duration: Duration) async throws(StorageError) -> Bool {
        let now = Date().epochMilliseconds
        let expires = now + Int64(duration / .milliseconds(1))
        return try await write { db, _ in
            try db.cachedStatement(
                sql: """
                    INSERT INTO job_leases (name, holder, expires_at) VALUES (?1, ?2, ?3)
                    ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
                    WHERE job_leases.holder = excluded.holder OR job_leases.expires_at < ?4
                    """
            ).execute(arguments: [job, holder, expires, now])
            return db.changesCount > 0
        }
    }

    package func releaseLease(_ job: String, holder: String) async throws(StorageError) {
        try await write { db, _ in
            try db.cachedStatement(sql: "DELETE FROM job_leases WHERE name = ? AND holder = ?").execute(arguments: [job, holder])
        }
    }

    package func leaseHolder(_ job: String) async throws(StorageError) -> String? {
        let now = Date().epochMilliseconds
        return try await read { db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT holder FROM job_leases WHERE name = ? AND expires_at >= ?"), arguments: [job, now])
        }
    }

    // MARK: - Reads

    package func customerExists(_ customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Bool {
        try await read { db in
            try Bool.fetchOne(
                db,
                sql: """
                    SELECT EXISTS (SELECT 1 FROM token_owners WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3)
                        OR EXISTS (SELECT 1 FROM customer_links l CROSS JOIN transactions t
                            ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
                            WHERE l.customer_id = ?1 AND l.environment = ?3 AND t.bundle_id = ?2)
                        OR EXISTS (SELECT 1 FROM promotional_grants WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3)
                    """, arguments: [customerId, bundleId, environment.rawValue]) ?? false
        }
    }

    package func ledger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await read { db in
            var ledger = Ledger()
            let (tokens, originals) = try self.customerFamilies(db, customerId, bundleId, environment)
            for token in tokens { ledger.tokenOwners[token] = customerId }
            for original in originals.sorted() {
                try self.loadSubscriptionFamily(db, nil, LedgerKey(environment, original), into: &ledger)
            }
            try Self.loadGrants(db, CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId), into: &ledger)
            return ledger
        }
    }

    package func entitlementLedger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await read { db in
            var ledger = Ledger()
            let (tokens, linked, byToken, consumables) = try self.customerFamiliesCountingConsumables(db, customerId, bundleId, environment)
            ledger.consumableTotals = consumables
            for token in tokens { ledger.tokenOwners[token] = customerId }
            try Self.loadGrants(db, CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId), into: &ledger)
            let decoder = AppStoreJSON.makeDecoder()
            for original in linked.union(byToken).sorted() {
                let key = LedgerKey(environment, original)
                try self.loadSubscription(db, nil, key, into: &ledger, decoder: decoder, signedData: false)
                // A family found through the customer's links is linked to them; only the others' links are read.
                if linked.contains(original) { ledger.explicitLinks[key] = customerId } else { try self.loadLink(db, key, into: &ledger) }
                // The family's transactions, latest first, from an index that covers the query (no row is read).
                // A subscription needs only its latest transaction decoded (and the others' tokens); any other
                // purchase needs all of its transactions.
                let order = try Row.fetchAll(db.cachedStatement(sql: Self.familyOrderSQL), arguments: [environment.rawValue, original])
                guard let latest = order.first, (latest["product_type"] as String?) == ProductType.autoRenewable.rawValue else {
                    try self.loadRows(db, nil, key, into: &ledger, decoder: decoder, signedData: false)
                    continue
                }
                if let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT * FROM transactions WHERE environment = ? AND transaction_id = ?"),
                    arguments: [environment.rawValue, latest["transaction_id"] as String]
                ) {
                    ledger.transactions[LedgerKey(environment, row["transaction_id"])] = try self.transaction(
                        row, db, nil, decoder: decoder, signedData: false
                    )
                }
                // The older transactions decide nothing but whose the subscription is, through their tokens.
                let omitted = Set(order.dropFirst().compactMap { ($0["app_account_token"] as String?).flatMap(LowercaseUUID.init(uuidString:)) })
                if !omitted.isEmpty { ledger.omittedTransactionTokens[key] = omitted }
            }
            return ledger
        }
    }

    package func ledger(families: [LedgerKey]) async throws(StorageError) -> Ledger {
        try await read { db in
            var ledger = Ledger()
            for family in families.sorted() { try self.loadSubscriptionFamily(db, nil, family, into: &ledger) }
            return ledger
        }
    }

    package func subscriptionFamilies(bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> [String] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT original_transaction_id FROM subscriptions WHERE environment = ? AND bundle_id = ? ORDER BY original_transaction_id",
                arguments: [environment.rawValue, bundleId]
            )
        }
    }

    package func containsNotification(_ uuid: String) async throws(StorageError) -> Bool {
        try await read { db in try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM notifications WHERE uuid = ?"), arguments: [uuid]) == true }
    }

    package func recoveryWatermark(_ app: VerifierKey) async throws(StorageError) -> Date? {
        try await read { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT watermark FROM recovery_watermarks WHERE bundle_id = ? AND environment = ?"),
                arguments: [app.bundleId, app.environment.rawValue]
            ).map(Date.init(epochMilliseconds:))
        }
    }

    package func rawPayload(notificationUUID: String) async throws(StorageError) -> String? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT jws_header, jws_payload, jws_signature, jws_raw FROM notifications WHERE uuid = ?",
                    arguments: [notificationUUID]
                )
            else { return nil }
            return try self.headers.jws(row, "jws", db, nil)
        }
    }

    package func notificationCounts() async throws(StorageError) -> [String: Int] {
        try await read { db in
            var counts: [String: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT outcome, COUNT(*) AS n FROM notifications GROUP BY outcome") {
                counts[row["outcome"]] = row["n"]
            }
            counts["rejected"] = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM refused_notifications") ?? 0
            return counts
        }
    }

    /// The refused notification requests kept, oldest first (for audit and tests).
    package func refusedNotifications() async throws(StorageError) -> [RefusedNotification] {
        try await read { db in
            let decoder = AppStoreJSON.makeDecoder()
            return try Row.fetchAll(db, sql: "SELECT * FROM refused_notifications ORDER BY id").map { row in
                var refusal = RefusedNotification(
                    input: [], receivedAt: Date(epochMilliseconds: row["received_at"]), code: row["code"],
                    message: row["message"], status: row["status"], claims: nil)
                refusal.size = row["size"]
                refusal.sha256 = row["sha256"]
                refusal.prefix = row["prefix"]
                refusal.claims = try (row["claims"] as String?).map { try decoder.decode(RefusedNotification.Claims.self, from: Data($0.utf8)) }
                return refusal
            }
        }
    }

    /// Bytes of the database file in use (pages holding data, after moving the write-ahead log into the file):
    /// what the ledger takes on disk, without the free pages SQLite keeps for reuse.
    package func usedBytes() async throws(StorageError) -> Int {
        let pool = self.pool
        do {
            return try await pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
                let pages = try Int.fetchOne(db, sql: "PRAGMA page_count")! - Int.fetchOne(db, sql: "PRAGMA freelist_count")!
                return pages * (try Int.fetchOne(db, sql: "PRAGMA page_size")!)
            }
        } catch {
            throw StorageError("cannot measure the database: \(error)", underlying: error)
        }
    }

    /// The writer connection's `PRAGMA synchronous` (2: FULL).
    func writerSynchronous() async throws(StorageError) -> Int {
        try await write { db, _ in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// The database answers a read, and writes are not failing (``WriteFaults``).
    package func checkHealth() async throws(StorageError) {
        _ = try await read { db in try Int.fetchOne(db, sql: "SELECT 1") }
        if let failure = writeFaults.failure() { throw StorageError(failure) }
    }

    // MARK: - Plumbing

    /// A write whose body also names the customers it may change; they are announced on ``changes`` after the
    /// commit, and also when the write fails after the body finished (it may have committed: a cancellation or an
    /// I/O error can surface after the commit), since dropping a cached answer needlessly is harmless and keeping
    /// a stale one is not.
    func writeAnnouncing<T: Sendable>(
        _ body: @escaping @Sendable (Database, HeaderReferences.Memo) throws -> (T, Set<String>)
    ) async throws(StorageError) -> T {
        let computed = Mutex<Set<String>>([])
        do {
            let (result, affected) = try await write { db, memo in
                let (result, affected) = try body(db, memo)
                computed.withLock { $0 = affected }
                return (result, affected)
            }
            changes.publish(affected)
            eventsAppended.signal()
            return result
        } catch {
            changes.publish(computed.withLock { $0 })
            throw error
        }
    }

    /// One write transaction; what it learned of JWS headers is remembered once it has committed.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database, HeaderReferences.Memo) throws -> T) async throws(StorageError) -> T {
        let headers = self.headers
        do {
            let (result, memo) = try await pool.write { db in
                let memo = HeaderReferences.Memo()
                return (try body(db, memo), UncheckedMemo(memo))
            }
            headers.commit(memo.memo)
            writeFaults.succeeded()
            return result
        } catch let error as StorageError {
            throw error
        } catch {
            let explained = Self.explain(error, path: path)
            if let explained, Self.isDatabaseFault(error) { writeFaults.failed(explained) }
            throw StorageError("write failed: \(explained ?? "\(error)")", underlying: error)
        }
    }

    /// Reads run GRDB's synchronous API on NIO's thread pool for blocking work: one hop there and one back. GRDB's
    /// asynchronous API hops through its own actor to the reader's dispatch queue and back, which costs more CPU per
    /// customer read under concurrent clients (Benchmarks/History.md, "Entitlement reads"). In WAL mode a read never
    /// waits for the writer, and writes keep GRDB's asynchronous API so that they never hold these threads through an
    /// fsync.
    func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(StorageError) -> T {
        let pool = self.pool
        do {
            return try await NIOThreadPool.singleton.runIfActive { try pool.read(body) }
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError("read failed: \(error)", underlying: error)
        }
    }
}

/// A write transaction's ``HeaderReferences/Memo`` handed back from the database's writer queue once the transaction
/// is over: nothing else holds it by then, so moving it across is safe.
private struct UncheckedMemo: @unchecked Sendable {
    let memo: HeaderReferences.Memo
    init(_ memo: HeaderReferences.Memo) { self.memo = memo }
}
