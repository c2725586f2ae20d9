import Foundation
import Logging
import PostgresNIO
import StorekeeperCore

/// The ledger's PostgreSQL schema, as migrations, oldest first. A migration never changes once released; a new one
/// is added instead. Several instances starting together migrate once: each takes a session advisory lock first,
/// and a database migrated by a newer Storekeeper (a migration this version does not know) is refused.
///
/// The tables are SQLite's (same names, same meaning) with PostgreSQL's types: times are milliseconds since 1970
/// (`BIGINT`), signed data is stored as ``StoredJWS`` parts (`BYTEA`) with each distinct protected header once in
/// `jws_headers`, found by its SHA-256 (a header is kilobytes long, past what a B-tree index entry may hold).
enum PostgresSchema {
    /// The advisory lock key under which migrations run (any constant; "storekeeper" in ASCII, truncated).
    static let migrationLock: Int64 = 0x73746F72656B6565

    static let migrations: [(id: String, sql: String)] = [
        (
            "v1: ledger",
            """
            CREATE TABLE jws_headers (id BIGSERIAL PRIMARY KEY, sha256 BYTEA NOT NULL UNIQUE, header TEXT NOT NULL);
            CREATE TABLE notifications (
                uuid TEXT PRIMARY KEY, type TEXT NOT NULL, subtype TEXT, signed_date BIGINT, environment TEXT,
                outcome TEXT NOT NULL, received_at BIGINT NOT NULL,
                jws_header BIGINT REFERENCES jws_headers (id), jws_payload BYTEA, jws_signature BYTEA, jws_raw TEXT);
            CREATE INDEX notifications_by_received_at ON notifications (received_at);
            CREATE TABLE transactions (
                environment TEXT NOT NULL, transaction_id TEXT NOT NULL, original_transaction_id TEXT NOT NULL,
                product_id TEXT NOT NULL, app_account_token TEXT, signed_date BIGINT NOT NULL, source TEXT NOT NULL,
                purchase_date BIGINT NOT NULL, product_type TEXT NOT NULL, bundle_id TEXT NOT NULL,
                quantity INTEGER NOT NULL, revoked BOOLEAN NOT NULL,
                jws_header BIGINT REFERENCES jws_headers (id), jws_payload BYTEA, jws_signature BYTEA, jws_raw TEXT,
                PRIMARY KEY (environment, transaction_id));
            CREATE INDEX transactions_latest_first ON transactions (
                environment, original_transaction_id, purchase_date DESC, transaction_id DESC);
            CREATE INDEX transactions_by_token ON transactions (app_account_token, environment, original_transaction_id)
                WHERE app_account_token IS NOT NULL;
            CREATE TABLE subscriptions (
                environment TEXT NOT NULL, original_transaction_id TEXT NOT NULL, bundle_id TEXT NOT NULL,
                status INTEGER, status_signed_date BIGINT, status_notification_uuid TEXT, renewal_signed_date BIGINT,
                renewal_header BIGINT REFERENCES jws_headers (id), renewal_payload BYTEA, renewal_signature BYTEA,
                renewal_raw TEXT,
                PRIMARY KEY (environment, original_transaction_id));
            CREATE INDEX subscriptions_by_app ON subscriptions (environment, bundle_id, original_transaction_id);
            CREATE TABLE customer_links (
                environment TEXT NOT NULL, original_transaction_id TEXT NOT NULL, customer_id TEXT NOT NULL,
                PRIMARY KEY (environment, original_transaction_id));
            CREATE INDEX customer_links_by_customer ON customer_links (customer_id, environment);
            CREATE TABLE token_owners (
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, token TEXT NOT NULL, customer_id TEXT NOT NULL,
                PRIMARY KEY (bundle_id, environment, token));
            CREATE INDEX token_owners_by_customer ON token_owners (customer_id, bundle_id, environment);
            CREATE TABLE refused_notifications (
                id BIGSERIAL PRIMARY KEY, received_at BIGINT NOT NULL, code TEXT NOT NULL, message TEXT NOT NULL,
                status INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL, prefix TEXT NOT NULL, claims TEXT);
            CREATE TABLE recovery_watermarks (
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, watermark BIGINT NOT NULL,
                PRIMARY KEY (bundle_id, environment));
            """
        ),
        (
            "v2: job leases",
            """
            CREATE TABLE job_leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
            """
        ),
        // v1's index of an app's subscriptions began with the environment, and so held both columns of a family's
        // key: PostgreSQL costed it the same as the primary key for a family's look-up, and the generic plans of the
        // prepared statements chose it, testing every subscription of the environment for the family's ID (a cost
        // growing with the ledger). With the app first it serves the list of an app's subscriptions, and nothing else.
        (
            "v3: subscriptions by app, app first",
            """
            DROP INDEX subscriptions_by_app;
            CREATE INDEX subscriptions_of_app ON subscriptions (bundle_id, environment, original_transaction_id);
            """
        ),
        // The token the server last issued to each customer of an app and environment (the token itself is also in
        // `token_owners`, which attributes purchases).
        (
            "v4: app account tokens the server issued",
            """
            CREATE TABLE issued_tokens (
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, token TEXT NOT NULL,
                issued_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (bundle_id, environment, customer_id));
            """
        ),
        // The outbox (as SQLite's v11). `position` is commit order: a transaction appending events takes the next
        // positions from `outbox_position`, whose row lock it holds until it commits, so positions are handed out in
        // the order the transactions commit and a reader that has seen a position has seen every earlier one.
        // Epoch milliseconds, as in SQLite.
        (
            "v5: outbox of events, customers' states, webhook deliveries",
            """
            CREATE TABLE outbox_position (id INTEGER PRIMARY KEY CHECK (id = 1), last BIGINT NOT NULL);
            INSERT INTO outbox_position (id, last) VALUES (1, 0);
            CREATE TABLE events (
                position BIGINT PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, sequence BIGINT NOT NULL,
                type TEXT NOT NULL, occurred_at BIGINT NOT NULL, cause TEXT NOT NULL, changes TEXT NOT NULL, state TEXT NOT NULL,
                UNIQUE (bundle_id, environment, customer_id, sequence));
            CREATE TABLE customer_states (
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, sequence BIGINT NOT NULL,
                state TEXT NOT NULL, valid_until BIGINT, PRIMARY KEY (bundle_id, environment, customer_id));
            CREATE INDEX customer_states_due ON customer_states (valid_until) WHERE valid_until IS NOT NULL;
            CREATE TABLE webhook_endpoints (
                name TEXT PRIMARY KEY, cursor BIGINT NOT NULL, failing_since BIGINT, failing_reason TEXT);
            CREATE TABLE deliveries (
                endpoint TEXT NOT NULL, position BIGINT NOT NULL, bundle_id TEXT NOT NULL, environment TEXT NOT NULL,
                customer_id TEXT NOT NULL, sequence BIGINT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at BIGINT NOT NULL, claimed_by TEXT, claimed_until BIGINT, created_at BIGINT NOT NULL,
                finished_at BIGINT, PRIMARY KEY (endpoint, position));
            CREATE INDEX deliveries_due ON deliveries (endpoint, next_attempt_at) WHERE status = 'pending';
            CREATE INDEX deliveries_by_customer ON deliveries (endpoint, bundle_id, environment, customer_id, sequence) WHERE status = 'pending';
            CREATE TABLE delivery_attempts (
                id BIGSERIAL PRIMARY KEY, endpoint TEXT NOT NULL, position BIGINT NOT NULL, attempted_at BIGINT NOT NULL,
                status_code INTEGER, latency_ms BIGINT NOT NULL, error TEXT, response_excerpt TEXT);
            CREATE INDEX delivery_attempts_by_delivery ON delivery_attempts (endpoint, position);
            """
        ),
        // The support audit log (as SQLite's v12): appended, never updated or deleted.
        (
            "v6: support audit log",
            """
            CREATE TABLE support_actions (
                id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, key_name TEXT NOT NULL, bundle_id TEXT NOT NULL,
                environment TEXT NOT NULL, customer_id TEXT NOT NULL, action TEXT NOT NULL, target TEXT,
                request TEXT NOT NULL, outcome TEXT NOT NULL, detail TEXT NOT NULL);
            CREATE INDEX support_actions_by_customer ON support_actions (bundle_id, environment, customer_id, id);
            CREATE INDEX support_actions_by_target ON support_actions (environment, target, id) WHERE target IS NOT NULL;
            """
        ),
        // Consumption requests and consents (as SQLite's v13). A notification's row is claimed with an empty type and
        // completed by an update, hence a trigger on both. (The function's body has no ";" at a line's end: statements
        // are split there.)
        (
            "v7: consumption requests and consents",
            """
            CREATE TABLE consumption_requests (
                uuid TEXT PRIMARY KEY, received_at BIGINT NOT NULL, state TEXT NOT NULL, bundle_id TEXT, environment TEXT,
                transaction_id TEXT, original_transaction_id TEXT, customer_id TEXT, product_id TEXT, product_type TEXT,
                reason TEXT, requested_at BIGINT, deadline BIGINT, decided_by TEXT, facts TEXT, answer TEXT,
                attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at BIGINT, last_error TEXT, finished_at BIGINT,
                claimed_by TEXT, claimed_until BIGINT);
            CREATE INDEX consumption_requests_open ON consumption_requests (received_at) WHERE state IN ('new', 'pending', 'manual');
            CREATE INDEX consumption_requests_by_customer ON consumption_requests (bundle_id, environment, customer_id, received_at);
            CREATE INDEX consumption_requests_by_deadline ON consumption_requests (bundle_id, environment, state, deadline);
            CREATE FUNCTION storekeeper_consumption_request_stored() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                INSERT INTO consumption_requests (uuid, received_at, state) VALUES (NEW.uuid, NEW.received_at, 'new')
                ON CONFLICT (uuid) DO NOTHING; RETURN NULL; END $$;
            CREATE TRIGGER consumption_request_stored AFTER INSERT OR UPDATE OF type ON notifications
                FOR EACH ROW WHEN (NEW.type = 'CONSUMPTION_REQUEST') EXECUTE FUNCTION storekeeper_consumption_request_stored();
            CREATE TABLE consumption_consents (
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL, consented BOOLEAN NOT NULL,
                at BIGINT NOT NULL, PRIMARY KEY (bundle_id, environment, customer_id));
            """
        ),
        // The support overview's window, as SQLite's v14.
        (
            "v8: transactions by purchase date, and refunds",
            """
            CREATE INDEX transactions_by_purchase_date ON transactions (purchase_date);
            CREATE INDEX transactions_refunded ON transactions (bundle_id, environment) WHERE revoked;
            """
        ),
        // Promotional entitlements, as SQLite's v15.
        (
            "v9: promotional entitlements",
            """
            CREATE TABLE promotional_grants (
                id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, environment TEXT NOT NULL, customer_id TEXT NOT NULL,
                entitlement TEXT NOT NULL, granted_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, granted_by TEXT NOT NULL,
                reason TEXT NOT NULL, revoked_at BIGINT, revoked_by TEXT, revoke_reason TEXT);
            CREATE INDEX promotional_grants_by_customer ON promotional_grants (customer_id, bundle_id, environment);
            """
        ),
        // As SQLite's v16: a mark, so that an older Storekeeper refuses the database instead of reading a digest as JSON.
        (
            "v10: customers' recorded states as digests",
            """
            COMMENT ON COLUMN customer_states.state IS 'sha256: and the first 128 bits of the SHA-256 of the state JSON (the event holds the JSON); JSON in rows written before v10';
            """
        ),
        // As SQLite's v17: secrets the ledger makes for itself (the polling cursors' key), each once.
        (
            "v11: the ledger's own secrets",
            """
            CREATE TABLE ledger_secrets (name TEXT PRIMARY KEY, value BYTEA NOT NULL);
            """
        ),
        // As SQLite's v18: tokens an erasure retired, which a later submission does not take. Epoch milliseconds.
        (
            "v12: app account tokens retired by an erasure",
            """
            CREATE TABLE erased_tokens (
                bundle_id TEXT NOT NULL, environment TEXT NOT NULL, token TEXT NOT NULL, erased_at BIGINT NOT NULL,
                PRIMARY KEY (bundle_id, environment, token));
            """
        ),
    ]

    /// Brings the database's schema up to date on `connection`, under the migration lock; returns the migrations
    /// applied (empty when it was up to date).
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws -> [String] {
        // Not bounded by a `statement_timeout` the role or the database may set: waiting for another instance's
        // migration, or building an index over a large table, may take longer.
        try await connection.execute("SET statement_timeout = 0")
        try await connection.execute("SELECT pg_advisory_lock(\(migrationLock))")
        do {
            let applied = try await run(connection, logger: logger)
            try await connection.execute("SELECT pg_advisory_unlock(\(migrationLock))")
            return applied
        } catch {
            try? await connection.execute("SELECT pg_advisory_unlock(\(migrationLock))")
            throw error
        }
    }

    /// The statements of a migration (each ends with `;` at the end of a line).
    static func statements(_ sql: String) -> [String] {
        sql.components(separatedBy: ";\n").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .map { $0.hasSuffix(";") ? String($0.dropLast()) : $0 }.filter { !$0.isEmpty }
    }

    private static func run(_ connection: PostgresConnection, logger: Logger) async throws -> [String] {
        try await connection.execute(
            "CREATE TABLE IF NOT EXISTS storekeeper_migrations (id TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        var before = Set<String>()
        for try await id in try await connection.query("SELECT id FROM storekeeper_migrations", logger: logger).decode(String.self) {
            before.insert(id)
        }
        // A ledger migrated by a newer Storekeeper may hold data this version would misread or leave stale.
        let unknown = before.subtracting(migrations.map(\.id))
        guard unknown.isEmpty else {
            throw StorageError(
                "the PostgreSQL database was migrated by a newer Storekeeper (migrations this version does not know: "
                    + "\(unknown.sorted().joined(separator: ", "))); run that version, or restore a backup made with this one"
            )
        }
        var applied: [String] = []
        for migration in migrations where !before.contains(migration.id) {
            try await connection.withTransaction(logger: logger) { connection in
                // One statement per query: the extended protocol postgres-nio speaks takes no more.
                for statement in statements(migration.sql) {
                    try await connection.execute(PostgresQuery(unsafeSQL: statement))
                }
                try await connection.execute("INSERT INTO storekeeper_migrations (id) VALUES (\(migration.id))")
            }
            applied.append(migration.id)
        }
        return applied
    }
}
