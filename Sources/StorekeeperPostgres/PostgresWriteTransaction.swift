import AppStoreModels
import AppStoreSigning
import Foundation
import PostgresNIO
import StorekeeperCore

/// The PostgreSQL side of one ``LedgerUnitOfWork``: its row operations inside one transaction (`READ COMMITTED`),
/// with several Storekeeper instances writing the same database at once.
///
/// **Why locks, and which.** A unit of work reads a family (one original transaction ID's rows), decides in Swift
/// (newest `signedDate` wins, ownership rules) and writes back. Under `READ COMMITTED` two instances writing one
/// family at once would both read the old rows and the second commit would overwrite the first's newer data (a lost
/// update). So each family is locked before it is read, with a transaction-level advisory lock on a hash of its key
/// (`pg_advisory_xact_lock`): it needs no row to exist yet (a family's first notification has none to
/// `SELECT … FOR UPDATE`), serializes only the writers of that family, and is released by the commit or rollback
/// whatever happens to the process. Token owners are locked the same way before they are read, so that two
/// customers' submissions cannot both take one token. `SERIALIZABLE` would be correct too, but would abort writers of
/// unrelated families whose predicate locks happen to overlap, and turn every conflict into a retry; conditional
/// upserts alone cannot express "apply the rules to what is there". Locks are taken in ascending key order within a
/// step, so single units of work cannot deadlock; a page of recovered notifications takes several steps' locks and
/// may, in which case PostgreSQL aborts one transaction and the store runs it again (as for any serialization or
/// deadlock failure, see ``PostgresLedgerStore``).
///
/// **A notification is applied once** because the database says so: the unit of work's first read claims its UUID
/// with `INSERT … ON CONFLICT DO NOTHING`, after taking its families' locks; a second instance claiming it waits for
/// the first's locks, then finds the row and answers "duplicate".
///
/// **Few statements.** Each statement costs a round trip and the server's parse and plan, most of what a write costs.
/// So a step's reads are two statements (the locks and the claim in one, `WITH locks AS MATERIALIZED (…) INSERT`;
/// every row of its families and tokens in another: under `READ COMMITTED` each statement reads what was committed
/// when it began, so the rows must be read by a statement that begins after the locks are held), and the writes are
/// not sent when made: they wait in ``pending`` and go as one statement (`WITH w0 AS (INSERT …), w1 AS (…)
/// SELECT pg_notify(…)`) before the next read or the commit. A notification that changes one purchase is then
/// `BEGIN`, three statements and `COMMIT`.
struct PostgresWriteTransaction: AsyncLedgerWriteTransaction {
    let store: PostgresLedgerStore
    let connection: PostgresConnection
    let memo: PostgresHeaders.Memo
    let pending = PendingWrites()

    func read(_ reads: LedgerReads) async throws -> LedgerReadResults {
        try await flush()
        var results = LedgerReadResults()
        let keys = (reads.families + reads.locking).map { "family \($0.environment.rawValue) \($0.id)" }
            + reads.tokens.sorted().map { "token \($0.bundleId) \($0.environment.rawValue) \($0.token)" }
        var binds = PostgresBindings(capacity: 3)
        binds.append(keys)
        if let uuid = reads.claimNotification {
            binds.append(uuid)
            binds.append(Date().epochMilliseconds)
            var claimed = false
            for try await _ in try await connection.run(PostgresQuery(unsafeSQL: """
                WITH locks AS MATERIALIZED (\(Self.lockSQL(1)))
                INSERT INTO notifications (uuid, type, outcome, received_at)
                SELECT $2, '', 'claimed', $3 FROM (SELECT count(*) FROM locks) AS held
                ON CONFLICT (uuid) DO NOTHING RETURNING 1
                """, binds: binds)).decode(Int.self) { claimed = true }
            guard claimed else {
                results.notificationExists = true
                return results
            }
        } else if !keys.isEmpty {
            try await connection.execute(PostgresQuery(unsafeSQL: Self.lockSQL(1), binds: binds))
        }
        guard !reads.families.isEmpty || !reads.tokens.isEmpty else { return results }
        try await store.loadFamilies(connection, memo, reads.families, tokens: reads.tokens, into: &results.ledger)
        results.tokenOwners = results.ledger.tokenOwners
        results.ledger.tokenOwners = [:]
        return results
    }

    /// Takes the transaction-level advisory locks of the keys in bind `$n` (a text array), in ascending order of
    /// their 64-bit hashes.
    static func lockSQL(_ n: Int) -> String {
        "SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($\(n)::text[]) AS k) AS keys ORDER BY h"
    }

    func write(_ changes: LedgerChanges) async throws {
        let faults = changes.notification == nil ? nil : store.unsafeFaultInjection
        try faults?("after-apply")
        try await store.save(connection, memo, changes, into: pending)
        try faults?("before-commit")
    }

    func setRecoveryWatermark(_ watermark: RecoveryWatermark) async throws {
        try pending.add("""
            INSERT INTO recovery_watermarks (bundle_id, environment, watermark)
            VALUES (\(pending.bind(watermark.app.bundleId)), \(pending.bind(watermark.app.environment.rawValue)),
                \(pending.bind(watermark.date.epochMilliseconds)))
            ON CONFLICT (bundle_id, environment) DO UPDATE SET watermark = excluded.watermark
            """)
        try store.unsafeFaultInjection?("after-watermark")
    }

    /// Sends the pending writes, as one statement, ending with `final` (a `SELECT`) when given.
    func flush(final: String? = nil) async throws {
        guard let query = pending.take(final: final) else { return }
        try await connection.execute(query)
    }
}

/// Writes not sent yet: each a data-modifying statement, sent together as the CTEs of one statement.
final class PendingWrites {
    private var statements: [String] = []
    private var binds = PostgresBindings()

    var bindCount: Int { binds.count }

    /// A placeholder for `value`, bound when the writes are sent.
    func bind<Value: PostgresThrowingDynamicTypeEncodable>(_ value: Value?) throws -> String {
        if let value { try binds.append(value) } else { binds.appendNull() }
        return "$\(binds.count)"
    }

    func add(_ statement: String) {
        statements.append(statement)
    }

    /// The statement that makes every pending write and then runs `final` (its `SELECT …` may use binds made with
    /// ``bind(_:)`` too), or `nil` when there is nothing to send; empties the list.
    func take(final: String?) -> PostgresQuery? {
        guard !statements.isEmpty || final != nil else { return nil }
        let ctes = statements.enumerated().map { "w\($0.offset) AS (\($0.element))" }
        let sql = (ctes.isEmpty ? "" : "WITH " + ctes.joined(separator: ",\n") + "\n") + (final ?? "SELECT 1")
        let query = PostgresQuery(unsafeSQL: sql, binds: binds)
        statements = []
        binds = PostgresBindings()
        return query
    }
}

extension PostgresLedgerStore {
    /// Adds to `pending` the writes of what a unit of work changed, and of the notification received (completing its
    /// claimed row). Headers not yet stored are inserted now (their IDs go in the rows).
    func save(_ connection: PostgresConnection, _ memo: PostgresHeaders.Memo, _ changes: LedgerChanges, into pending: PendingWrites) async throws {
        // PostgreSQL takes at most 65,535 binds in a statement: a long list (a copied ledger's page) goes in several.
        func sendIfLong() async throws {
            if pending.bindCount > 30_000, let query = pending.take(final: nil) { try await connection.execute(query) }
        }
        for transaction in changes.transactions {
            guard let environment = transaction.info.environment else { continue }
            let jws = try await headers.store(transaction.jws, connection, memo)
            let info = transaction.info
            let p = pending
            pending.add("""
                INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id,
                    app_account_token, signed_date, source, purchase_date, product_type, bundle_id, quantity, revoked,
                    jws_header, jws_payload, jws_signature, jws_raw)
                VALUES (\(try p.bind(environment.rawValue)), \(try p.bind(info.transactionId)), \(try p.bind(info.originalTransactionId)),
                    \(try p.bind(info.productId)), \(try p.bind(info.appAccountToken?.description)),
                    \(try p.bind(transaction.signedDate.epochMilliseconds)), \(try p.bind(transaction.source)),
                    \(try p.bind(info.purchaseDate.epochMilliseconds)), \(try p.bind(info.type.rawValue)), \(try p.bind(info.bundleId)),
                    \(try p.bind(Int32(info.quantity ?? 1))), \(try p.bind(info.revocationDate != nil)), \(try p.bind(jws.header)),
                    \(try p.bind(jws.payload)), \(try p.bind(jws.signature)), \(try p.bind(jws.raw)))
                ON CONFLICT (environment, transaction_id) DO UPDATE SET
                    original_transaction_id = excluded.original_transaction_id, product_id = excluded.product_id,
                    app_account_token = excluded.app_account_token, signed_date = excluded.signed_date,
                    source = excluded.source, purchase_date = excluded.purchase_date, product_type = excluded.product_type,
                    bundle_id = excluded.bundle_id, quantity = excluded.quantity, revoked = excluded.revoked,
                    jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                    jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
                """)
            try await sendIfLong()
        }
        for subscription in changes.subscriptions {
            let key = subscription.key
            let renewal = try await headers.store(subscription.renewalJWS, connection, memo)
            let p = pending
            pending.add("""
                INSERT INTO subscriptions (environment, original_transaction_id, bundle_id, status, status_signed_date,
                    status_notification_uuid, renewal_signed_date, renewal_header, renewal_payload, renewal_signature, renewal_raw)
                VALUES (\(try p.bind(key.environment.rawValue)), \(try p.bind(key.id)), \(try p.bind(subscription.bundleId)),
                    \(try p.bind(subscription.status.map { Int32($0.rawValue) })), \(try p.bind(subscription.statusSignedDate?.epochMilliseconds)),
                    \(try p.bind(subscription.statusNotificationUUID)), \(try p.bind(subscription.renewalSignedDate?.epochMilliseconds)),
                    \(try p.bind(renewal.header)), \(try p.bind(renewal.payload)), \(try p.bind(renewal.signature)), \(try p.bind(renewal.raw)))
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                    bundle_id = excluded.bundle_id, status = excluded.status, status_signed_date = excluded.status_signed_date,
                    status_notification_uuid = excluded.status_notification_uuid,
                    renewal_signed_date = excluded.renewal_signed_date, renewal_header = excluded.renewal_header,
                    renewal_payload = excluded.renewal_payload, renewal_signature = excluded.renewal_signature,
                    renewal_raw = excluded.renewal_raw
                """)
            try await sendIfLong()
        }
        for (key, customer) in changes.links.sorted(by: { $0.key < $1.key }) {
            let p = pending
            pending.add("""
                INSERT INTO customer_links (environment, original_transaction_id, customer_id)
                VALUES (\(try p.bind(key.environment.rawValue)), \(try p.bind(key.id)), \(try p.bind(customer)))
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET customer_id = excluded.customer_id
                """)
            try await sendIfLong()
        }
        for (token, customer) in changes.tokenOwners.sorted(by: { $0.key < $1.key }) {
            let p = pending
            pending.add("""
                INSERT INTO token_owners (bundle_id, environment, token, customer_id)
                VALUES (\(try p.bind(token.bundleId)), \(try p.bind(token.environment.rawValue)), \(try p.bind(token.token.description)),
                    \(try p.bind(customer)))
                ON CONFLICT (bundle_id, environment, token) DO UPDATE SET customer_id = excluded.customer_id
                """)
            try await sendIfLong()
        }
        if let record = changes.notification {
            let payload = try await headers.store(record.signedPayload, connection, memo)
            let p = pending
            pending.add("""
                INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, received_at,
                    jws_header, jws_payload, jws_signature, jws_raw)
                VALUES (\(try p.bind(record.notificationUUID)), \(try p.bind(record.notificationType.rawValue)),
                    \(try p.bind(record.subtype?.rawValue)), \(try p.bind(record.signedDate?.epochMilliseconds)),
                    \(try p.bind(record.environment?.rawValue)), \(try p.bind(record.outcome)), \(try p.bind(Date().epochMilliseconds)),
                    \(try p.bind(payload.header)), \(try p.bind(payload.payload)), \(try p.bind(payload.signature)), \(try p.bind(payload.raw)))
                ON CONFLICT (uuid) DO UPDATE SET type = excluded.type, subtype = excluded.subtype,
                    signed_date = excluded.signed_date, environment = excluded.environment, outcome = excluded.outcome,
                    received_at = excluded.received_at, jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                    jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
                """)
        }
    }
}
