import AppStoreModels
import AppStoreSigning
import Foundation
import GRDB
import StorekeeperCore

/// The ledger's SQLite schema, as the migrations that build it, oldest first. A migration never changes once
/// released; a new one is added instead (``SQLiteLedgerStore`` refuses a database migrated by a newer version).
extension SQLiteLedgerStore {
    /// The migration that moves signed data into ``StoredJWS`` form; the store rewrites the file after it
    /// (`VACUUM`) to give the space back.
    static let compactSignedDataMigration = "v7: signed data stored once (JWS headers by reference, payloads decoded)"

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: ledger") { db in
            try db.execute(
                sql: """
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
            try db.execute(
                sql: """
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
            try db.execute(
                sql: """
                    DROP INDEX transactions_by_token;
                    CREATE INDEX transactions_by_token ON transactions (app_account_token, environment, original_transaction_id);
                    """)
        }
        migrator.registerMigration("v4: transactions' app, quantity and refund as columns") { db in
            // What a read counts consumables by, without parsing each one's JSON; and the token index covers the
            // product type, or the planner prefers `transactions_latest_first` on the environment alone for a look-up
            // by token that also tests the type (SQLiteQueryPlanTests).
            try db.execute(
                sql: """
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
        migrator.registerMigration("v5: app account tokens per app and environment") { db in
            // A token was one global owner: a submission for another customer, even of another app, moved every
            // purchase carrying it. Each owner row now names the app and environment; an existing owner keeps every
            // (app, environment) in which a transaction or renewal info carries the token.
            try db.execute(
                sql: """
                    CREATE TABLE token_owners (
                        bundle_id TEXT NOT NULL, environment TEXT NOT NULL, token TEXT NOT NULL, customer_id TEXT NOT NULL,
                        PRIMARY KEY (bundle_id, environment, token));
                    CREATE INDEX token_owners_by_customer ON token_owners (customer_id, bundle_id, environment);
                    INSERT OR IGNORE INTO token_owners (bundle_id, environment, token, customer_id)
                        SELECT DISTINCT t.bundle_id, t.environment, t.app_account_token, k.customer_id
                        FROM transactions t JOIN tokens k ON k.token = t.app_account_token WHERE t.bundle_id IS NOT NULL;
                    INSERT OR IGNORE INTO token_owners (bundle_id, environment, token, customer_id)
                        SELECT s.bundle_id, s.environment, lower(json_extract(s.renewal_info, '$.appAccountToken')), k.customer_id
                        FROM subscriptions s JOIN tokens k ON k.token = lower(json_extract(s.renewal_info, '$.appAccountToken'))
                        WHERE s.renewal_info IS NOT NULL;
                    DROP TABLE tokens;
                    """)
        }
        migrator.registerMigration("v6: refused notifications without their payloads") { db in
            // Every refused request's whole signedPayload (up to 1 MiB) was kept, without limit: anyone could fill
            // the disk. What an auditor needs is kept instead (RefusedNotification), within a row limit.
            try db.execute(
                sql: """
                    CREATE TABLE refused_notifications (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, received_at INTEGER NOT NULL, code TEXT NOT NULL,
                        message TEXT NOT NULL, status INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
                        prefix TEXT NOT NULL, claims TEXT);
                    """)
            let ids = try Int64.fetchAll(db, sql: "SELECT id FROM rejected_notifications ORDER BY id")
            for id in ids {
                guard let row = try Row.fetchOne(db, sql: "SELECT * FROM rejected_notifications WHERE id = ?", arguments: [id]) else { continue }
                let reason: String = row["reason"]
                let code = reason.split(separator: ":", maxSplits: 1).first.map(String.init) ?? reason
                let payload: String = row["signed_payload"]
                let claims = try? UnverifiedJWS.unsafeDecodePayload(payload, as: NotificationPayload.self)
                let refusal = RefusedNotification(
                    input: Array(payload.utf8), receivedAt: Date(epochMilliseconds: row["received_at"]), code: code,
                    message: reason, status: 400, claims: claims
                )
                try insertRefused(db, refusal)
            }
            try db.execute(sql: "DROP TABLE rejected_notifications")
        }
        migrator.registerMigration(compactSignedDataMigration) { db in
            try migrateToStoredJWS(db)
        }
        migrator.registerMigration("v8: notification recovery watermarks") { db in
            try db.execute(
                sql: """
                    CREATE TABLE recovery_watermarks (
                        bundle_id TEXT NOT NULL, environment TEXT NOT NULL, watermark INTEGER NOT NULL,
                        PRIMARY KEY (bundle_id, environment));
                    """)
        }
        migrator.registerMigration("v9: job leases") { db in
            // Scheduled jobs (recovery, retention) and `recover`/`reconcile --all` take a lease here, so that the
            // processes on one ledger (a `serve`, a `recover`, a `reconcile --all`) coordinate through the file as
            // instances do through PostgreSQL. Expiry is in epoch milliseconds of the machine's clock, which every
            // process on one SQLite file shares.
            try db.execute(sql: "CREATE TABLE job_leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at INTEGER NOT NULL)")
        }
        migrator.registerMigration("v10: app account tokens the server issued") { db in
            // The token the server last issued to each customer of an app and environment (the token itself is also
            // in `token_owners`, which attributes purchases). Epoch milliseconds.
            try db.execute(
                sql: """
                    CREATE TABLE issued_tokens (
                        bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, token TEXT NOT NULL,
                        issued_at INTEGER NOT NULL, PRIMARY KEY (bundle_id, environment, customer_id));
                    """)
        }
        migrator.registerMigration("v11: outbox of events, customers' states, webhook deliveries") { db in
            try db.execute(sql: outboxSchema)
        }
        migrator.registerMigration("v12: support audit log") { db in
            // Appended, never updated or deleted: what support did, who, when, and what came of it. Epoch milliseconds.
            try db.execute(
                sql: """
                    CREATE TABLE support_actions (
                        id INTEGER PRIMARY KEY, at INTEGER NOT NULL, key_name TEXT NOT NULL, bundle_id TEXT NOT NULL,
                        environment TEXT NOT NULL, customer_id TEXT NOT NULL, action TEXT NOT NULL, target TEXT,
                        request TEXT NOT NULL, outcome TEXT NOT NULL, detail TEXT NOT NULL);
                    CREATE INDEX support_actions_by_customer ON support_actions (bundle_id, environment, customer_id, id);
                    CREATE INDEX support_actions_by_target ON support_actions (environment, target, id) WHERE target IS NOT NULL;
                    """)
        }
        migrator.registerMigration("v13: consumption requests and consents") { db in
            // A CONSUMPTION_REQUEST's row is made by a trigger in the transaction that stores the notification, however
            // it came (webhook, recovery, copy): none is missed, and no other notification's write pays for it.
            try db.execute(
                sql: """
                    CREATE TABLE consumption_requests (
                        uuid TEXT PRIMARY KEY, received_at INTEGER NOT NULL, state TEXT NOT NULL, bundle_id TEXT, environment TEXT,
                        transaction_id TEXT, original_transaction_id TEXT, customer_id TEXT, product_id TEXT, product_type TEXT,
                        reason TEXT, requested_at INTEGER, deadline INTEGER, decided_by TEXT, facts TEXT, answer TEXT,
                        attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER, last_error TEXT, finished_at INTEGER,
                        claimed_by TEXT, claimed_until INTEGER);
                    CREATE INDEX consumption_requests_open ON consumption_requests (received_at) WHERE state IN ('new', 'pending', 'manual');
                    CREATE INDEX consumption_requests_by_customer ON consumption_requests (bundle_id, environment, customer_id, received_at);
                    CREATE INDEX consumption_requests_by_deadline ON consumption_requests (bundle_id, environment, state, deadline);
                    CREATE TRIGGER consumption_request_stored AFTER INSERT ON notifications
                    WHEN NEW.type = 'CONSUMPTION_REQUEST'
                    BEGIN
                        INSERT OR IGNORE INTO consumption_requests (uuid, received_at, state) VALUES (NEW.uuid, NEW.received_at, 'new');
                    END;
                    CREATE TABLE consumption_consents (
                        bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, consented INTEGER NOT NULL,
                        at INTEGER NOT NULL, PRIMARY KEY (bundle_id, environment, customer_id));
                    """)
        }
        migrator.registerMigration("v14: transactions by purchase date, and refunds") { db in
            // The support overview's window (SupportOverview.Queries): a range of purchase dates, and an app's refunds,
            // without scanning the app's history (a year of renewals of 100,000 customers took 0.6 s to scan). Not on
            // (bundle_id, environment, …): the planner then preferred it to `transactions_latest_first` for a customer's
            // look-ups, and scanned the app's transactions for each (a search by customer ID went from 2 to 140 ms).
            try db.execute(
                sql: """
                    CREATE INDEX transactions_by_purchase_date ON transactions (purchase_date);
                    CREATE INDEX transactions_refunded ON transactions (bundle_id, environment) WHERE revoked;
                    """)
        }
        migrator.registerMigration("v15: promotional entitlements") { db in
            try db.execute(sql: promotionalGrantsSchema)
        }
        // No table changes: from here on `customer_states.state` holds a digest of the state (the event holds the
        // JSON). The migration is a mark, so that an older Storekeeper refuses the ledger instead of reading a digest
        // as JSON (it would announce the customers' purchases again).
        migrator.registerMigration("v16: customers' recorded states as digests") { _ in }
        migrator.registerMigration("v17: the ledger's own secrets") { db in
            try db.execute(sql: ledgerSecretsSchema)
        }
        migrator.registerMigration("v18: app account tokens retired by an erasure") { db in
            try db.execute(sql: erasedTokensSchema)
        }
        return migrator
    }

    /// Secrets the ledger makes for itself, by name, each once (`LedgerStore.ledgerSecret(_:orNew:)`): the key of
    /// the polling cursors.
    static let ledgerSecretsSchema = "CREATE TABLE ledger_secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)"

    /// App account tokens an erased customer owned or was issued (`DELETE /v1/customers/{id}`): a later submission
    /// of a purchase carrying one links that purchase alone, and never takes the token (with it, every purchase made
    /// under the erased identity). Epoch milliseconds.
    static let erasedTokensSchema = """
        CREATE TABLE erased_tokens (
            bundle_id TEXT NOT NULL, environment TEXT NOT NULL, token TEXT NOT NULL, erased_at INTEGER NOT NULL,
            PRIMARY KEY (bundle_id, environment, token)) WITHOUT ROWID
        """

    /// Promotional entitlements support granted (``PromotionalGrant``), found by customer. Epoch milliseconds.
    static let promotionalGrantsSchema = """
        CREATE TABLE promotional_grants (
            id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL,
            entitlement TEXT NOT NULL, granted_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, granted_by TEXT NOT NULL,
            reason TEXT NOT NULL, revoked_at INTEGER, revoked_by TEXT, revoke_reason TEXT);
        CREATE INDEX promotional_grants_by_customer ON promotional_grants (customer_id, bundle_id, environment);
        """

    /// The outbox (DESIGN: events flow out of the ledger): `events` in commit order (`position`, the rowid: SQLite has
    /// one writer, so rowid order is commit order), each customer's `sequence` without gaps; `customer_states` the
    /// last state each customer's events were judged against, with when it changes by itself (`valid_until`, for the
    /// expiry job); `webhook_endpoints` each configured endpoint's fan-out cursor and failing mark; `deliveries` one
    /// row per event and endpoint; `delivery_attempts` every attempt. Epoch milliseconds.
    static let outboxSchema = """
        CREATE TABLE events (
            position INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
            bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, sequence INTEGER NOT NULL,
            type TEXT NOT NULL, occurred_at INTEGER NOT NULL, cause TEXT NOT NULL, changes TEXT NOT NULL, state TEXT NOT NULL,
            UNIQUE (bundle_id, environment, customer_id, sequence));
        CREATE TABLE customer_states (
            bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, sequence INTEGER NOT NULL,
            state TEXT NOT NULL, valid_until INTEGER, PRIMARY KEY (bundle_id, environment, customer_id)) WITHOUT ROWID;
        CREATE INDEX customer_states_due ON customer_states (valid_until) WHERE valid_until IS NOT NULL;
        CREATE TABLE webhook_endpoints (
            name TEXT PRIMARY KEY, cursor INTEGER NOT NULL, failing_since INTEGER, failing_reason TEXT);
        CREATE TABLE deliveries (
            endpoint TEXT NOT NULL, position INTEGER NOT NULL, bundle_id TEXT NOT NULL, environment TEXT NOT NULL,
            customer_id TEXT NOT NULL, sequence INTEGER NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at INTEGER NOT NULL, claimed_by TEXT, claimed_until INTEGER, created_at INTEGER NOT NULL,
            finished_at INTEGER, PRIMARY KEY (endpoint, position));
        CREATE INDEX deliveries_due ON deliveries (endpoint, next_attempt_at) WHERE status = 'pending';
        CREATE INDEX deliveries_by_customer ON deliveries (endpoint, bundle_id, environment, customer_id, sequence) WHERE status = 'pending';
        CREATE TABLE delivery_attempts (
            id INTEGER PRIMARY KEY, endpoint TEXT NOT NULL, position INTEGER NOT NULL, attempted_at INTEGER NOT NULL,
            status_code INTEGER, latency_ms INTEGER NOT NULL, error TEXT, response_excerpt TEXT);
        CREATE INDEX delivery_attempts_by_delivery ON delivery_attempts (endpoint, position);
        """

    /// Migration v7: each raw JWS (notifications' payloads, transactions, renewal infos) becomes a ``StoredJWS``
    /// (header by reference in `jws_headers`, payload decoded, signature as bytes), or is kept as text in the
    /// `…_raw` column when it would not be reproduced exactly; the decoded `info` and `renewal_info` JSON go (they
    /// are the payloads, decoded on reading).
    static func migrateToStoredJWS(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE jws_headers (id INTEGER PRIMARY KEY, header TEXT NOT NULL UNIQUE);
                ALTER TABLE notifications ADD COLUMN jws_header INTEGER;
                ALTER TABLE notifications ADD COLUMN jws_payload BLOB;
                ALTER TABLE notifications ADD COLUMN jws_signature BLOB;
                ALTER TABLE notifications ADD COLUMN jws_raw TEXT;
                ALTER TABLE transactions ADD COLUMN jws_header INTEGER;
                ALTER TABLE transactions ADD COLUMN jws_payload BLOB;
                ALTER TABLE transactions ADD COLUMN jws_signature BLOB;
                ALTER TABLE transactions ADD COLUMN jws_raw TEXT;
                ALTER TABLE subscriptions ADD COLUMN renewal_header INTEGER;
                ALTER TABLE subscriptions ADD COLUMN renewal_payload BLOB;
                ALTER TABLE subscriptions ADD COLUMN renewal_signature BLOB;
                ALTER TABLE subscriptions ADD COLUMN renewal_raw TEXT;
                """)
        let headers = HeaderReferences()
        let memo = HeaderReferences.Memo()
        for uuid in try String.fetchAll(db, sql: "SELECT uuid FROM notifications") {
            guard let jws = try String.fetchOne(db, sql: "SELECT signed_payload FROM notifications WHERE uuid = ?", arguments: [uuid]) else {
                continue
            }
            let stored = try headers.store(jws, db, memo)
            try db.execute(
                sql: "UPDATE notifications SET jws_header = ?, jws_payload = ?, jws_signature = ?, jws_raw = ? WHERE uuid = ?",
                arguments: stored.arguments + [uuid]
            )
        }
        for key in try Row.fetchAll(db, sql: "SELECT environment, transaction_id FROM transactions") {
            let arguments: StatementArguments = [key["environment"] as String, key["transaction_id"] as String]
            guard
                let jws = try String.fetchOne(
                    db, sql: "SELECT jws FROM transactions WHERE environment = ? AND transaction_id = ?", arguments: arguments)
            else { continue }
            let stored = try headers.store(jws, db, memo)
            try db.execute(
                sql:
                    "UPDATE transactions SET jws_header = ?, jws_payload = ?, jws_signature = ?, jws_raw = ? WHERE environment = ? AND transaction_id = ?",
                arguments: stored.arguments + arguments
            )
        }
        for key in try Row.fetchAll(db, sql: "SELECT environment, original_transaction_id FROM subscriptions WHERE renewal_jws IS NOT NULL") {
            let arguments: StatementArguments = [key["environment"] as String, key["original_transaction_id"] as String]
            guard
                let jws = try String.fetchOne(
                    db, sql: "SELECT renewal_jws FROM subscriptions WHERE environment = ? AND original_transaction_id = ?", arguments: arguments
                )
            else { continue }
            let stored = try headers.store(jws, db, memo)
            try db.execute(
                sql: """
                    UPDATE subscriptions SET renewal_header = ?, renewal_payload = ?, renewal_signature = ?, renewal_raw = ?
                    WHERE environment = ? AND original_transaction_id = ?
                    """,
                arguments: stored.arguments + arguments
            )
        }
        try db.execute(
            sql: """
                ALTER TABLE notifications DROP COLUMN signed_payload;
                ALTER TABLE transactions DROP COLUMN jws;
                ALTER TABLE transactions DROP COLUMN info;
                ALTER TABLE subscriptions DROP COLUMN renewal_jws;
                ALTER TABLE subscriptions DROP COLUMN renewal_info;
                CREATE INDEX notifications_by_received_at ON notifications (received_at);
                """)
    }
}
