import Foundation
import NIOCore
import PostgresNIO

/// The statements a write or a read runs every time, prepared once per connection (postgres-nio's
/// ``PostgresPreparedStatement``): PostgreSQL then neither parses nor plans them again, which would otherwise be most
/// of its work per notification and per read (Benchmarks/History.md, issue 11's second round).
/// Their SQL is fixed; what varies goes in binds, lists as arrays (`unnest`).
protocol PreparedStatementText {
    /// Unique per text: a new text needs a new name (a connection keeps what it prepared under a name).
    static var name: String { get }
    static var sql: String { get }
}

/// A ``PreparedStatementText`` with its binds; its rows are decoded by the caller.
struct Prepared<Text: PreparedStatementText>: PostgresPreparedStatement {
    typealias Row = PostgresRow
    static var name: String { Text.name }
    static var sql: String { Text.sql }
    let bindings: PostgresBindings

    func makeBindings() -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

extension PostgresConnection {
    /// Runs a prepared statement (preparing it on this connection the first time). A connection on which it fails
    /// is closed (the pool opens another): postgres-nio remembers a statement whose preparation failed and fails every
    /// later use of it on that connection with the same error, without asking the server. Seen with
    /// `statement_timeout`: a preparation waiting for a table another client had locked was cancelled, and every read
    /// on that connection failed at once with "canceling statement due to statement timeout" long after the lock
    /// was gone. This catches what fails before rows are handed back (a preparation; the whole of a statement that
    /// returns none); a row-returning statement failing as it runs fails while its rows are read, and keeps its
    /// connection, which is sound (its preparation succeeded). Statements fail rarely (a deadlock, a timeout, an
    /// outage), so telling a failed preparation from a failed execution is not worth a reconnection saved.
    func run<Text: PreparedStatementText>(
        _ text: Text.Type, _ bindings: PostgresBindings
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow> {
        do {
            return try await execute(Prepared<Text>(bindings: bindings), logger: Self.quiet)
        } catch {
            try? await close()
            throw error
        }
    }
}

/// A one-dimensional PostgreSQL array whose elements may be `NULL` (postgres-nio encodes arrays of non-optional
/// elements only), in the binary array format: dimensions, a has-nulls flag, the element type, then the length and
/// lower bound of the dimension and each element as its length (−1 for `NULL`) and bytes.
struct NullableArray<Element: PostgresArrayEncodable>: PostgresEncodable {
    var elements: [Element?]

    init(_ elements: [Element?]) { self.elements = elements }

    static var psqlType: PostgresDataType { Element.psqlArrayType }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) throws {
        buffer.writeInteger(elements.isEmpty ? 0 : 1, as: Int32.self)
        buffer.writeInteger(elements.contains { $0 == nil } ? 1 : 0, as: Int32.self)
        buffer.writeInteger(Element.psqlType.rawValue)
        guard !elements.isEmpty else { return }
        buffer.writeInteger(Int32(elements.count))
        buffer.writeInteger(1, as: Int32.self)
        for element in elements {
            guard let element else {
                buffer.writeInteger(-1, as: Int32.self)
                continue
            }
            let lengthIndex = buffer.writerIndex
            buffer.writeInteger(0, as: Int32.self)
            let start = buffer.writerIndex
            try element.encode(into: &buffer, context: context)
            buffer.setInteger(Int32(buffer.writerIndex - start), at: lengthIndex)
        }
    }
}

extension PostgresBindings {
    /// Appends a column of values as an array.
    mutating func appendColumn<Row, Element: PostgresArrayEncodable>(_ rows: some Collection<Row>, _ value: (Row) -> Element?) throws {
        try append(NullableArray(rows.map(value)))
    }
}

// MARK: - The statements

/// Takes the transaction-level advisory locks of the keys in `$1` (a text array), in ascending order of their
/// 64-bit hashes.
enum LockStatement: PreparedStatementText {
    static let name = "storekeeper_lock_v1"
    static let lockSQL =
        "SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($1::text[]) AS k) AS keys ORDER BY h"
    static let sql = lockSQL
}

/// The locks of `$1`, then the claim of notification `$2` received at `$3`: a row when it is new.
enum LockAndClaimStatement: PreparedStatementText {
    static let name = "storekeeper_lock_and_claim_v1"
    static let sql = """
        WITH locks AS MATERIALIZED (\(LockStatement.lockSQL))
        INSERT INTO notifications (uuid, type, outcome, received_at)
        SELECT $2::text, '', 'claimed', $3::int8 FROM (SELECT count(*) FROM locks) AS held
        ON CONFLICT (uuid) DO NOTHING RETURNING 1
        """
}

/// The locks of `$1`, then the claims of the distinct notifications `$2` (a text array) received at `$3`: the
/// UUIDs of those that are new.
enum LockAndClaimAllStatement: PreparedStatementText {
    static let name = "storekeeper_lock_and_claim_all_v1"
    static let sql = """
        WITH locks AS MATERIALIZED (\(LockStatement.lockSQL))
        INSERT INTO notifications (uuid, type, outcome, received_at)
        SELECT u, '', 'claimed', $3::int8 FROM (SELECT count(*) FROM locks) AS held, unnest($2::text[]) AS u
        ON CONFLICT (uuid) DO NOTHING RETURNING uuid
        """
}

/// Every write a unit of work makes, as one statement: each table's rows as arrays (an empty array writes
/// nothing), then the announcement to other instances (`$49` the channel, `$50` the payload, none when `NULL`).
///
/// A notification's row completes the row its claim inserted and keeps the claim's `received_at` (when it arrived):
/// an update that changes no indexed column can be HOT (no new entry in either of the table's indexes, when the page
/// has room; Benchmarks/History.md, tenth round).
enum WriteStatement: PreparedStatementText {
    static let name = "storekeeper_write_v2"
    static let sql = """
        WITH t AS (
            INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id,
                app_account_token, signed_date, source, purchase_date, product_type, bundle_id, quantity, revoked,
                jws_header, jws_payload, jws_signature, jws_raw)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::text[],
                $8::int8[], $9::text[], $10::text[], $11::int4[], $12::bool[], $13::int8[], $14::bytea[], $15::bytea[], $16::text[])
            ON CONFLICT (environment, transaction_id) DO UPDATE SET
                original_transaction_id = excluded.original_transaction_id, product_id = excluded.product_id,
                app_account_token = excluded.app_account_token, signed_date = excluded.signed_date,
                source = excluded.source, purchase_date = excluded.purchase_date, product_type = excluded.product_type,
                bundle_id = excluded.bundle_id, quantity = excluded.quantity, revoked = excluded.revoked,
                jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
        ), s AS (
            INSERT INTO subscriptions (environment, original_transaction_id, bundle_id, status, status_signed_date,
                status_notification_uuid, renewal_signed_date, renewal_header, renewal_payload, renewal_signature, renewal_raw)
            SELECT * FROM unnest($17::text[], $18::text[], $19::text[], $20::int4[], $21::int8[], $22::text[], $23::int8[],
                $24::int8[], $25::bytea[], $26::bytea[], $27::text[])
            ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                bundle_id = excluded.bundle_id, status = excluded.status, status_signed_date = excluded.status_signed_date,
                status_notification_uuid = excluded.status_notification_uuid,
                renewal_signed_date = excluded.renewal_signed_date, renewal_header = excluded.renewal_header,
                renewal_payload = excluded.renewal_payload, renewal_signature = excluded.renewal_signature,
                renewal_raw = excluded.renewal_raw
        ), l AS (
            INSERT INTO customer_links (environment, original_transaction_id, customer_id)
            SELECT * FROM unnest($28::text[], $29::text[], $30::text[])
            ON CONFLICT (environment, original_transaction_id) DO UPDATE SET customer_id = excluded.customer_id
        ), o AS (
            INSERT INTO token_owners (bundle_id, environment, token, customer_id)
            SELECT * FROM unnest($31::text[], $32::text[], $33::text[], $34::text[])
            ON CONFLICT (bundle_id, environment, token) DO UPDATE SET customer_id = excluded.customer_id
        ), n AS (
            INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, received_at,
                jws_header, jws_payload, jws_signature, jws_raw)
            SELECT * FROM unnest($35::text[], $36::text[], $37::text[], $38::int8[], $39::text[], $40::text[], $41::int8[],
                $42::int8[], $43::bytea[], $44::bytea[], $45::text[])
            ON CONFLICT (uuid) DO UPDATE SET type = excluded.type, subtype = excluded.subtype,
                signed_date = excluded.signed_date, environment = excluded.environment, outcome = excluded.outcome,
                jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
        ), w AS (
            INSERT INTO recovery_watermarks (bundle_id, environment, watermark)
            SELECT * FROM unnest($46::text[], $47::text[], $48::int8[])
            ON CONFLICT (bundle_id, environment) DO UPDATE SET watermark = excluded.watermark
        )
        SELECT pg_notify($49::text, $50::text) WHERE $50::text IS NOT NULL
        """
}
