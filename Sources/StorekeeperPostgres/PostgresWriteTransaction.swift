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
/// with `INSERT … ON CONFLICT DO NOTHING`; a second instance claiming it waits for the first's commit and then finds
/// the row, and answers "duplicate".
struct PostgresWriteTransaction: AsyncLedgerWriteTransaction {
    let store: PostgresLedgerStore
    let connection: PostgresConnection
    let memo: PostgresHeaders.Memo

    func read(_ reads: LedgerReads) async throws -> LedgerReadResults {
        var results = LedgerReadResults()
        if let uuid = reads.claimNotification {
            var claimed = false
            for try await _ in try await connection.run("""
                INSERT INTO notifications (uuid, type, outcome, received_at) VALUES (\(uuid), '', 'claimed', \(Date().epochMilliseconds))
                ON CONFLICT (uuid) DO NOTHING RETURNING 1
                """).decode(Int.self) { claimed = true }
            results.notificationExists = !claimed
        }
        if !reads.families.isEmpty {
            try await lock(reads.families.map { "family \($0.environment.rawValue) \($0.id)" })
            try await store.loadFamilies(connection, memo, reads.families, into: &results.ledger)
        }
        if !reads.tokens.isEmpty {
            let tokens = reads.tokens.sorted()
            try await lock(tokens.map { "token \($0.bundleId) \($0.environment.rawValue) \($0.token)" })
            for token in tokens {
                for try await owner in try await connection.run("""
                    SELECT customer_id FROM token_owners
                    WHERE bundle_id = \(token.bundleId) AND environment = \(token.environment.rawValue) AND token = \(token.token.description)
                    """).decode(String.self) {
                    results.tokenOwners[token] = owner
                }
            }
        }
        return results
    }

    /// Takes the transaction-level advisory locks of these keys, in ascending order of their 64-bit hashes.
    private func lock(_ keys: [String]) async throws {
        try await connection.execute("""
            SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(\(keys)::text[]) AS k) AS locks ORDER BY h
            """)
    }

    func write(_ changes: LedgerChanges) async throws {
        let faults = changes.notification == nil ? nil : store.unsafeFaultInjection
        try faults?("after-apply")
        try await store.save(connection, memo, changes)
        try faults?("before-commit")
    }

    func setRecoveryWatermark(_ watermark: RecoveryWatermark) async throws {
        try await connection.execute("""
            INSERT INTO recovery_watermarks (bundle_id, environment, watermark)
            VALUES (\(watermark.app.bundleId), \(watermark.app.environment.rawValue), \(watermark.date.epochMilliseconds))
            ON CONFLICT (bundle_id, environment) DO UPDATE SET watermark = excluded.watermark
            """)
        try store.unsafeFaultInjection?("after-watermark")
    }
}

extension PostgresLedgerStore {
    /// Writes what a unit of work changed, and the notification received (completing its claimed row).
    func save(_ connection: PostgresConnection, _ memo: PostgresHeaders.Memo, _ changes: LedgerChanges) async throws {
        for transaction in changes.transactions {
            guard let environment = transaction.info.environment else { continue }
            let jws = try await headers.store(transaction.jws, connection, memo)
            let info = transaction.info
            try await connection.execute("""
                INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id,
                    app_account_token, signed_date, source, purchase_date, product_type, bundle_id, quantity, revoked,
                    jws_header, jws_payload, jws_signature, jws_raw)
                VALUES (\(environment.rawValue), \(info.transactionId), \(info.originalTransactionId), \(info.productId),
                    \(info.appAccountToken?.description), \(transaction.signedDate.epochMilliseconds), \(transaction.source),
                    \(info.purchaseDate.epochMilliseconds), \(info.type.rawValue), \(info.bundleId), \(info.quantity ?? 1),
                    \(info.revocationDate != nil), \(jws.header), \(jws.payload), \(jws.signature), \(jws.raw))
                ON CONFLICT (environment, transaction_id) DO UPDATE SET
                    original_transaction_id = excluded.original_transaction_id, product_id = excluded.product_id,
                    app_account_token = excluded.app_account_token, signed_date = excluded.signed_date,
                    source = excluded.source, purchase_date = excluded.purchase_date, product_type = excluded.product_type,
                    bundle_id = excluded.bundle_id, quantity = excluded.quantity, revoked = excluded.revoked,
                    jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                    jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
                """)
        }
        for subscription in changes.subscriptions {
            let key = subscription.key
            let renewal = try await headers.store(subscription.renewalJWS, connection, memo)
            try await connection.execute("""
                INSERT INTO subscriptions (environment, original_transaction_id, bundle_id, status, status_signed_date,
                    status_notification_uuid, renewal_signed_date, renewal_header, renewal_payload, renewal_signature, renewal_raw)
                VALUES (\(key.environment.rawValue), \(key.id), \(subscription.bundleId), \(subscription.status?.rawValue),
                    \(subscription.statusSignedDate?.epochMilliseconds), \(subscription.statusNotificationUUID),
                    \(subscription.renewalSignedDate?.epochMilliseconds), \(renewal.header), \(renewal.payload),
                    \(renewal.signature), \(renewal.raw))
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                    bundle_id = excluded.bundle_id, status = excluded.status, status_signed_date = excluded.status_signed_date,
                    status_notification_uuid = excluded.status_notification_uuid,
                    renewal_signed_date = excluded.renewal_signed_date, renewal_header = excluded.renewal_header,
                    renewal_payload = excluded.renewal_payload, renewal_signature = excluded.renewal_signature,
                    renewal_raw = excluded.renewal_raw
                """)
        }
        for (key, customer) in changes.links.sorted(by: { $0.key < $1.key }) {
            try await connection.execute("""
                INSERT INTO customer_links (environment, original_transaction_id, customer_id) VALUES (\(key.environment.rawValue), \(key.id), \(customer))
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET customer_id = excluded.customer_id
                """)
        }
        for (token, customer) in changes.tokenOwners.sorted(by: { $0.key < $1.key }) {
            try await connection.execute("""
                INSERT INTO token_owners (bundle_id, environment, token, customer_id)
                VALUES (\(token.bundleId), \(token.environment.rawValue), \(token.token.description), \(customer))
                ON CONFLICT (bundle_id, environment, token) DO UPDATE SET customer_id = excluded.customer_id
                """)
        }
        if let record = changes.notification {
            let payload = try await headers.store(record.signedPayload, connection, memo)
            try await connection.execute("""
                INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, received_at,
                    jws_header, jws_payload, jws_signature, jws_raw)
                VALUES (\(record.notificationUUID), \(record.notificationType.rawValue), \(record.subtype?.rawValue),
                    \(record.signedDate?.epochMilliseconds), \(record.environment?.rawValue), \(record.outcome),
                    \(Date().epochMilliseconds), \(payload.header), \(payload.payload), \(payload.signature), \(payload.raw))
                ON CONFLICT (uuid) DO UPDATE SET type = excluded.type, subtype = excluded.subtype,
                    signed_date = excluded.signed_date, environment = excluded.environment, outcome = excluded.outcome,
                    received_at = excluded.received_at, jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                    jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
                """)
        }
    }
}
