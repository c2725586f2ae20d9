public import AppStoreModels
public import AppStoreSigning
public import Foundation
import GRDB
import NIOPosix
import Synchronization
public import StorekeeperCore

/// The embedded ledger: one SQLite file in WAL mode with `synchronous = FULL`, so an acknowledged notification
/// survives a crash or power loss. Schema migrations run when the store opens.
///
/// Each write loads the rows it touches into a ``Ledger``, applies the same rules as the in-memory ledger, and
/// writes back what changed, all inside one write transaction (SQLite serializes writers), so the database and the
/// reference model cannot disagree.
public final class SQLiteLedgerStore: LedgerStore {
    let pool: DatabasePool
    /// A test seam that runs inside write transactions at named points; throwing from it rolls the write back.
    let unsafeFaultInjection: (@Sendable (String) throws -> Void)?
    public let changes = LedgerChangeFeed()
    /// The schema migrations this open applied, oldest first (empty when the database was up to date).
    public let migrationsApplied: [String]

    /// Opens (and creates or migrates) the database at `path`.
    public convenience init(path: String, unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil) throws(StorageError) {
        try self.init(path: path, unsafeFaultInjection: unsafeFaultInjection, statementTrace: nil)
    }

    /// `statementTrace` sees the SQL of every statement any connection runs (tests check their query plans).
    init(
        path: String, unsafeFaultInjection: (@Sendable (String) throws -> Void)?, statementTrace: (@Sendable (String) -> Void)?
    ) throws(StorageError) {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            if let statementTrace { db.trace { event in if case .statement(let statement) = event { statementTrace(statement.sql) } } }
        }
        configuration.busyMode = .timeout(10)
        do {
            try FileManager.default.createDirectory(
                at: URL(fileURLWithPath: path).deletingLastPathComponent(), withIntermediateDirectories: true
            )
            pool = try DatabasePool(path: path, configuration: configuration)
            let migrator = Self.migrator
            let before = try pool.read { db in try migrator.appliedIdentifiers(db) }
            // A ledger migrated by a newer Storekeeper may hold data this version would misread or leave stale.
            let unknown = before.subtracting(migrator.migrations)
            guard unknown.isEmpty else {
                throw StorageError(
                    "cannot open the SQLite database at \(path): it was migrated by a newer Storekeeper (migrations this version does not know: "
                        + "\(unknown.sorted().joined(separator: ", "))); run that version, or restore a backup made with this one"
                )
            }
            try migrator.migrate(pool)
            migrationsApplied = migrator.migrations.filter { !before.contains($0) }
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError("cannot open the SQLite database at \(path): \(error)", underlying: error)
        }
        self.unsafeFaultInjection = unsafeFaultInjection
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: ledger") { db in
            try db.execute(sql: """
                CREATE TABLE notifications (
                    uuid TEXT PRIMARY KEY, type TEXT NOT NULL, subtype TEXT, signed_date INTEGER, environment TEXT,
                    outcome TEXT NOT NULL, signed_payload TEXT NOT NULL, received_at INTEGER NOT NULL);
                CREATE TABLE rejected_notifications (
                    id INTEGER PRIMARY KEY AUTOINCREMENT, received_at INTEGER NOT NULL, reason TEXT NOT NULL,
                    signed_payload TEXT NOT NULL);
                CREATE TABLE transactions (
                    environment TEXT NOT NULL, transaction_id TEXT NOT NULL, original_transaction_id TEXT NOT NULL,
                    product_id TEXT NOT NULL, app_account_token TEXT, signed_date INTEGER NOT NULL, jws TEXT NOT NULL,
                    source TEXT NOT NULL, info TEXT NOT NULL, PRIMARY KEY (environment, transaction_id));
                CREATE INDEX transactions_by_original ON transactions (environment, original_transaction_id);
                CREATE INDEX transactions_by_token ON transactions (app_account_token);
                CREATE TABLE subscriptions (
                    environment TEXT NOT NULL, original_transaction_id TEXT NOT NULL, bundle_id TEXT NOT NULL,
                    status INTEGER, status_signed_date INTEGER, status_notification_uuid TEXT,
                    renewal_info TEXT, renewal_signed_date INTEGER, renewal_jws TEXT,
                    PRIMARY KEY (environment, original_transaction_id));
                CREATE TABLE customer_links (
                    environment TEXT NOT NULL, original_transaction_id TEXT NOT NULL, customer_id TEXT NOT NULL,
                    PRIMARY KEY (environment, original_transaction_id));
                CREATE INDEX customer_links_by_customer ON customer_links (customer_id);
                CREATE TABLE tokens (token TEXT PRIMARY KEY, customer_id TEXT NOT NULL);
                CREATE INDEX tokens_by_customer ON tokens (customer_id);
                """)
        }
        migrator.registerMigration("v2: transactions' purchase date and product type as columns") { db in
            // What reads order and pick transactions by, without parsing each one's JSON.
            try db.execute(sql: """
                ALTER TABLE transactions ADD COLUMN purchase_date INTEGER;
                ALTER TABLE transactions ADD COLUMN product_type TEXT;
                UPDATE transactions SET purchase_date = json_extract(info, '$.purchaseDate'), product_type = json_extract(info, '$.type');
                CREATE INDEX transactions_latest_first ON transactions (
                    environment, original_transaction_id, purchase_date DESC, transaction_id DESC, product_type, app_account_token);
                """)
        }
        migrator.registerMigration("v3: transactions by app account token, environment and family") { db in
            // A read finds a customer's subscriptions through their app account tokens. With an index on the token
            // alone, SQLite's planner preferred `transactions_latest_first` for `environment = ?` and scanned every
            // transaction of the environment on each read (tested in SQLiteQueryPlanTests).
            try db.execute(sql: """
                DROP INDEX transactions_by_token;
                CREATE INDEX transactions_by_token ON transactions (app_account_token, environment, original_transaction_id);
                """)
        }
        migrator.registerMigration("v4: transactions' app, quantity and refund as columns") { db in
            // What a read counts consumables by, without parsing each one's JSON; and the token index covers the
            // product type, or the planner prefers `transactions_latest_first` on the environment alone for a look-up
            // by token that also tests the type (SQLiteQueryPlanTests).
            try db.execute(sql: """
                DROP INDEX transactions_by_token;
                CREATE INDEX transactions_by_token ON transactions (app_account_token, environment, original_transaction_id, product_type);
                ALTER TABLE transactions ADD COLUMN bundle_id TEXT;
                ALTER TABLE transactions ADD COLUMN quantity INTEGER;
                ALTER TABLE transactions ADD COLUMN revoked INTEGER;
                UPDATE transactions SET bundle_id = json_extract(info, '$.bundleId'),
                    quantity = COALESCE(json_extract(info, '$.quantity'), 1),
                    revoked = json_extract(info, '$.revocationDate') IS NOT NULL;
                """)
        }
        return migrator
    }

    // MARK: - Writes

    public func apply(_ notification: VerifiedNotification) async throws(StorageError) -> ApplyOutcome {
        try await writeAnnouncing { db -> (ApplyOutcome, Set<String>) in
            let uuid = notification.payload.notificationUUID
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM notifications WHERE uuid = ?", arguments: [uuid]) == true {
                return (.duplicate, [])
            }
            var ledger = try self.load(db, touching: notification)
            try self.loadTokenOwners(db, into: &ledger, also: [
                notification.transaction?.payload.appAccountToken, notification.renewalInfo?.payload.appAccountToken,
            ])
            let before = ledger
            ledger.apply(notification)
            try self.unsafeFaultInjection?("after-apply")
            try self.save(db, ledger, comparedTo: before)
            let record = ledger.notifications[uuid]!
            try db.execute(
                sql: """
                    INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, signed_payload, received_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    uuid, record.notificationType.rawValue, record.subtype?.rawValue,
                    record.signedDate?.epochMilliseconds, record.environment?.rawValue, record.outcome,
                    record.signedPayload, Date().epochMilliseconds,
                ]
            )
            try self.unsafeFaultInjection?("before-commit")
            return (record.outcome == "applied" ? .applied : .recorded, ledger.customersAffected(since: before))
        }
    }

    public func recordRejected(signedPayload: String, reason: String, at date: Date) async throws(StorageError) {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO rejected_notifications (received_at, reason, signed_payload) VALUES (?, ?, ?)",
                arguments: [date.epochMilliseconds, reason, signedPayload]
            )
        }
    }

    public func submit(_ transaction: VerifiedSignedData<TransactionInfo>, customerId: String) async throws(StorageError) {
        try await writeAnnouncing { db -> ((), Set<String>) in
            let info = transaction.payload
            guard let environment = info.environment else { return ((), []) }
            var ledger = Ledger()
            try self.loadSubscriptionFamily(db, LedgerKey(environment, info.originalTransactionId), into: &ledger)
            try self.loadTokenOwners(db, into: &ledger, also: [info.appAccountToken])
            let before = ledger
            ledger.apply(info, jws: transaction.jws, source: "app")
            ledger.link(info, to: customerId)
            try self.save(db, ledger, comparedTo: before)
            return ((), ledger.customersAffected(since: before))
        }
    }

    // MARK: - Reads

    public func customerExists(_ customerId: String) async throws(StorageError) -> Bool {
        try await read { db in
            try Bool.fetchOne(db, sql: """
                SELECT EXISTS (SELECT 1 FROM customer_links WHERE customer_id = ?)
                    OR EXISTS (SELECT 1 FROM tokens WHERE customer_id = ?)
                """, arguments: [customerId, customerId]) ?? false
        }
    }

    public func ledger(for customerId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await read { db in
            var ledger = Ledger()
            let (tokens, originals) = try self.customerFamilies(db, customerId, environment)
            for token in tokens { if let uuid = LowercaseUUID(uuidString: token) { ledger.tokenOwners[uuid] = customerId } }
            for original in originals.sorted() {
                try self.loadSubscriptionFamily(db, LedgerKey(environment, original), into: &ledger)
            }
            return ledger
        }
    }

    public func entitlementLedger(for customerId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await read { db in
            var ledger = Ledger()
            let (tokens, linked, byToken, consumables) = try self.customerFamiliesCountingConsumables(db, customerId, environment)
            ledger.consumableTotals = consumables
            for token in tokens { if let uuid = LowercaseUUID(uuidString: token) { ledger.tokenOwners[uuid] = customerId } }
            let decoder = AppStoreJSON.makeDecoder()
            for original in linked.union(byToken).sorted() {
                let key = LedgerKey(environment, original)
                try self.loadSubscription(db, key, into: &ledger)
                // A family found through the customer's links is linked to them; only the others' links are read.
                if linked.contains(original) { ledger.explicitLinks[key] = customerId } else { try self.loadLink(db, key, into: &ledger) }
                // The family's transactions, latest first, from an index that covers the query (no row is read).
                // A subscription needs only its latest transaction decoded (and the others' tokens); any other
                // purchase needs all of its transactions.
                let order = try Row.fetchAll(db.cachedStatement(sql: Self.familyOrderSQL), arguments: [environment.rawValue, original])
                guard let latest = order.first, (latest["product_type"] as String?) == ProductType.autoRenewable.rawValue else {
                    try self.loadRows(db, key, into: &ledger)
                    continue
                }
                if let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT * FROM transactions WHERE environment = ? AND transaction_id = ?"),
                    arguments: [environment.rawValue, latest["transaction_id"] as String]
                ) {
                    ledger.transactions[LedgerKey(environment, row["transaction_id"])] = try Self.transaction(row, decoder: decoder)
                }
                // The older transactions decide nothing but whose the subscription is, through their tokens.
                let omitted = Set(order.dropFirst().compactMap { ($0["app_account_token"] as String?).flatMap(LowercaseUUID.init(uuidString:)) })
                if !omitted.isEmpty { ledger.omittedTransactionTokens[key] = omitted }
            }
            return ledger
        }
    }

    public func notificationCounts() async throws(StorageError) -> [String: Int] {
        try await read { db in
            var counts: [String: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT outcome, COUNT(*) AS n FROM notifications GROUP BY outcome") {
                counts[row["outcome"]] = row["n"]
            }
            counts["rejected"] = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM rejected_notifications") ?? 0
            return counts
        }
    }

    public func checkHealth() async throws(StorageError) {
        _ = try await read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    // MARK: - Rows

    /// The rows a notification touches: for the subscription or purchase of its transaction and of its renewal
    /// info, every transaction, the customer link and the subscription record (the link and the transactions' app
    /// account tokens name the customers a change concerns, even when only the renewal info changes).
    private func load(_ db: Database, touching notification: VerifiedNotification) throws -> Ledger {
        var ledger = Ledger()
        var families = Set<LedgerKey>()
        if let transaction = notification.transaction?.payload, let environment = transaction.environment {
            families.insert(LedgerKey(environment, transaction.originalTransactionId))
        }
        if let renewal = notification.renewalInfo?.payload, let environment = renewal.environment {
            families.insert(LedgerKey(environment, renewal.originalTransactionId))
        }
        for family in families.sorted() { try loadSubscriptionFamily(db, family, into: &ledger) }
        return ledger
    }

    /// A customer's app account tokens, and the original transaction IDs of everything linked to them or carrying
    /// one of their tokens, through cached statements whatever the number of tokens (a statement built for the
    /// tokens at hand would be compiled on every read).
    func customerFamilies(_ db: Database, _ customerId: String, _ environment: AppStoreEnvironment) throws -> (tokens: Set<String>, originals: Set<String>) {
        let tokens = try String.fetchAll(db.cachedStatement(sql: "SELECT token FROM tokens WHERE customer_id = ?"), arguments: [customerId])
        var originals = Set(try String.fetchAll(
            db.cachedStatement(sql: "SELECT original_transaction_id FROM customer_links WHERE customer_id = ? AND environment = ?"),
            arguments: [customerId, environment.rawValue]
        ))
        for token in tokens {
            originals.formUnion(try String.fetchAll(db.cachedStatement(sql: Self.familiesByTokenSQL), arguments: [token, environment.rawValue]))
        }
        return (Set(tokens), originals)
    }

    /// The transactions of one family (environment `?1`, original transaction ID `?2`), latest first, with what
    /// picks the ones to decode.
    static let familyOrderSQL = """
        SELECT transaction_id, product_type, app_account_token FROM transactions
        WHERE environment = ?1 AND original_transaction_id = ?2
        ORDER BY purchase_date DESC, transaction_id DESC
        """

    /// The original transaction IDs of the transactions carrying app account token `?1` in environment `?2`.
    static let familiesByTokenSQL = "SELECT original_transaction_id FROM transactions WHERE app_account_token = ?1 AND environment = ?2"

    /// The owners of every app account token the loaded rows carry, and of `extra` tokens (the incoming data's).
    private func loadTokenOwners(_ db: Database, into ledger: inout Ledger, also extra: [LowercaseUUID?]) throws {
        // One cached statement per token: a statement built for the tokens at hand would be compiled on every write.
        for token in ledger.appAccountTokens.union(extra.compactMap { $0 }) {
            if let owner = try String.fetchOne(
                db.cachedStatement(sql: "SELECT customer_id FROM tokens WHERE token = ?"), arguments: [token.description]
            ) {
                ledger.tokenOwners[token] = owner
            }
        }
    }

    /// Every transaction of one original transaction ID, its customer link and its subscription record.
    private func loadSubscriptionFamily(_ db: Database, _ key: LedgerKey, into ledger: inout Ledger) throws {
        try loadTransactions(db, environment: key.environment, originalTransactionId: key.id, into: &ledger)
        try loadSubscription(db, key, into: &ledger)
    }

    private func loadTransactions(_ db: Database, environment: AppStoreEnvironment, originalTransactionId: String, into ledger: inout Ledger) throws {
        try loadRows(db, LedgerKey(environment, originalTransactionId), into: &ledger)
        try loadLink(db, LedgerKey(environment, originalTransactionId), into: &ledger)
    }

    /// Every transaction of one original transaction ID, decoded.
    private func loadRows(_ db: Database, _ key: LedgerKey, into ledger: inout Ledger) throws {
        let rows = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM transactions WHERE environment = ? AND original_transaction_id = ?"),
            arguments: [key.environment.rawValue, key.id]
        )
        let decoder = AppStoreJSON.makeDecoder()
        for row in rows {
            ledger.transactions[LedgerKey(key.environment, row["transaction_id"])] = try Self.transaction(row, decoder: decoder)
        }
    }

    /// The customer an original transaction ID is explicitly linked to, if any.
    private func loadLink(_ db: Database, _ key: LedgerKey, into ledger: inout Ledger) throws {
        if let customer = try String.fetchOne(
            db.cachedStatement(sql: "SELECT customer_id FROM customer_links WHERE environment = ? AND original_transaction_id = ?"),
            arguments: [key.environment.rawValue, key.id]
        ) {
            ledger.explicitLinks[key] = customer
        }
    }

    /// A `transactions` row as the ledger keeps it.
    private static func transaction(_ row: Row, decoder: JSONDecoder) throws -> LedgerTransaction {
        LedgerTransaction(
            info: try decoder.decode(TransactionInfo.self, from: Data((row["info"] as String).utf8)),
            signedDate: Date(epochMilliseconds: row["signed_date"]), source: row["source"], jws: row["jws"]
        )
    }

    private func loadSubscription(_ db: Database, _ key: LedgerKey, into ledger: inout Ledger) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT * FROM subscriptions WHERE environment = ? AND original_transaction_id = ?"),
            arguments: [key.environment.rawValue, key.id]
        ) else { return }
        var subscription = LedgerSubscription(key: key, bundleId: row["bundle_id"])
        subscription.status = (row["status"] as Int?).map(SubscriptionStatus.init(rawValue:))
        subscription.statusSignedDate = (row["status_signed_date"] as Int64?).map(Date.init(epochMilliseconds:))
        subscription.statusNotificationUUID = row["status_notification_uuid"]
        if let json = row["renewal_info"] as String? {
            subscription.renewalInfo = try AppStoreJSON.makeDecoder().decode(RenewalInfo.self, from: Data(json.utf8))
        }
        subscription.renewalSignedDate = (row["renewal_signed_date"] as Int64?).map(Date.init(epochMilliseconds:))
        subscription.renewalJWS = row["renewal_jws"]
        ledger.subscriptions[key] = subscription
    }

    /// Writes the records that differ from `before`.
    private func save(_ db: Database, _ ledger: Ledger, comparedTo before: Ledger) throws {
        let encoder = AppStoreJSON.makeEncoder()
        for (key, transaction) in ledger.transactions where before.transactions[key] != transaction {
            try db.execute(
                sql: """
                    INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id,
                        app_account_token, signed_date, jws, source, info, purchase_date, product_type,
                        bundle_id, quantity, revoked)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (environment, transaction_id) DO UPDATE SET
                        original_transaction_id = excluded.original_transaction_id, product_id = excluded.product_id,
                        app_account_token = excluded.app_account_token, signed_date = excluded.signed_date,
                        jws = excluded.jws, source = excluded.source, info = excluded.info,
                        purchase_date = excluded.purchase_date, product_type = excluded.product_type,
                        bundle_id = excluded.bundle_id, quantity = excluded.quantity, revoked = excluded.revoked
                    """,
                arguments: [
                    key.environment.rawValue, key.id, transaction.info.originalTransactionId, transaction.info.productId,
                    transaction.info.appAccountToken?.description, transaction.signedDate.epochMilliseconds, transaction.jws,
                    transaction.source, String(decoding: try encoder.encode(transaction.info), as: UTF8.self),
                    transaction.info.purchaseDate.epochMilliseconds, transaction.info.type.rawValue,
                    transaction.info.bundleId, transaction.info.quantity ?? 1, transaction.info.revocationDate != nil,
                ]
            )
        }
        for (key, subscription) in ledger.subscriptions where before.subscriptions[key] != subscription {
            try db.execute(
                sql: """
                    INSERT INTO subscriptions (environment, original_transaction_id, bundle_id, status, status_signed_date,
                        status_notification_uuid, renewal_info, renewal_signed_date, renewal_jws)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                        bundle_id = excluded.bundle_id, status = excluded.status, status_signed_date = excluded.status_signed_date,
                        status_notification_uuid = excluded.status_notification_uuid, renewal_info = excluded.renewal_info,
                        renewal_signed_date = excluded.renewal_signed_date, renewal_jws = excluded.renewal_jws
                    """,
                arguments: [
                    key.environment.rawValue, key.id, subscription.bundleId, subscription.status?.rawValue,
                    subscription.statusSignedDate?.epochMilliseconds, subscription.statusNotificationUUID,
                    try subscription.renewalInfo.map { String(decoding: try encoder.encode($0), as: UTF8.self) },
                    subscription.renewalSignedDate?.epochMilliseconds, subscription.renewalJWS,
                ]
            )
        }
        for (key, customer) in ledger.explicitLinks where before.explicitLinks[key] != customer {
            try db.execute(
                sql: """
                    INSERT INTO customer_links (environment, original_transaction_id, customer_id) VALUES (?, ?, ?)
                    ON CONFLICT (environment, original_transaction_id) DO UPDATE SET customer_id = excluded.customer_id
                    """,
                arguments: [key.environment.rawValue, key.id, customer]
            )
        }
        for (token, customer) in ledger.tokenOwners where before.tokenOwners[token] != customer {
            try db.execute(
                sql: "INSERT INTO tokens (token, customer_id) VALUES (?, ?) ON CONFLICT (token) DO UPDATE SET customer_id = excluded.customer_id",
                arguments: [token.description, customer]
            )
        }
    }

    // MARK: - Plumbing

    /// A write whose body also names the customers it may change; they are announced on ``changes`` after the
    /// commit, and also when the write fails after the body finished (it may have committed: a cancellation or an
    /// I/O error can surface after the commit), since dropping a cached answer needlessly is harmless and keeping
    /// a stale one is not.
    private func writeAnnouncing<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> (T, Set<String>)
    ) async throws(StorageError) -> T {
        let computed = Mutex<Set<String>>([])
        do {
            let (result, affected) = try await write { db in
                let (result, affected) = try body(db)
                computed.withLock { $0 = affected }
                return (result, affected)
            }
            changes.publish(affected)
            return result
        } catch {
            changes.publish(computed.withLock { $0 })
            throw error
        }
    }

    private func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(StorageError) -> T {
        do {
            return try await pool.write(body)
        } catch {
            throw StorageError("write failed: \(error)", underlying: error)
        }
    }

    /// Reads run GRDB's synchronous API on NIO's thread pool for blocking work: one hop there and one back. GRDB's
    /// asynchronous API hops through its own actor to the reader's dispatch queue and back, which cost about 30 %
    /// more CPU per customer read under 16 concurrent clients (BENCHMARKS.md). In WAL mode a read never waits for
    /// the writer, and writes keep GRDB's asynchronous API so that they never hold these threads through an fsync.
    private func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(StorageError) -> T {
        let pool = self.pool
        do {
            return try await NIOThreadPool.singleton.runIfActive { try pool.read(body) }
        } catch {
            throw StorageError("read failed: \(error)", underlying: error)
        }
    }
}
