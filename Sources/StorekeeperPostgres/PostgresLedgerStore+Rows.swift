import AppStoreModels
import AppStoreSigning
import Foundation
import Logging
import PostgresNIO
import StorekeeperCore

/// Rows to ledger records, each read one statement: every statement costs a round trip and the server's parse and
/// plan, which is most of what a write or a read costs here. `memo` is the write transaction's
/// (``PostgresHeaders/Memo``), `nil` in reads.
///
/// The statements return the rows of several tables as one result (`UNION ALL`), in these columns:
///
/// | kind | row | env | a | b | c | d | e | n1 | n2 | n3 | h, p, s, r |
/// |---|---|---|---|---|---|---|---|---|---|---|---|
/// | 0 | transaction | environment | transaction ID | original ID | product type | token | source | signed date | purchase date | | JWS |
/// | 1 | subscription | environment | | original ID | bundle ID | status notification | | status | status signed | renewal signed | renewal JWS |
/// | 2 | customer link | environment | | original ID | customer ID | | | | | | |
/// | 3 | token owner | environment | token | bundle ID | customer ID | | | | | | |
/// | 4 | consumables counted | environment | bundle ID | product ID | | | | units | purchases | | |
/// | 5 | promotional grant | environment | grant ID | entitlement | customer ID | granted by | bundle ID | granted | expires | revoked | -, revoked by and revoke reason (UTF-8), reason |
///
/// after a first column `q`: which of the statement's requests the row answers (1 when it answers one), and sorted
/// by it, then by kind, then a family's transactions latest first (the order ``Ledger`` reads a subscription in).
extension PostgresLedgerStore {
    /// One row of a statement's result, by what it holds (the generic columns named).
    struct FamilyRow {
        /// Which of the statement's requests the row answers (`q`, from 1).
        var request: Int64
        var environment: AppStoreEnvironment
        var record: Record

        enum Record {
            case transaction(TransactionRow)
            case subscription(LedgerSubscription, renewal: PostgresHeaders.Columns)
            case customerLink(originalTransactionId: String, customerId: String)
            case tokenOwner(token: LowercaseUUID, bundleId: String, customerId: String)
            case consumables(bundleId: String, productId: String, units: Int64, purchases: Int64)
            case grant(PromotionalGrant)
        }

        struct TransactionRow {
            var transactionId: String
            var originalTransactionId: String
            var productType: String?
            var appAccountToken: String?
            var source: String
            var signedDate: Int64
            var jws: PostgresHeaders.Columns
        }

        /// The row as the columns of the table above; `nil` for one whose required columns are empty (skipped).
        init?(
            _ raw: (Int64, Int32, String, String?, String?, String?, String?, String?, Int64?, Int64?, Int64?, Int64?, Data?, Data?, String?)
        ) throws(StorageError) {
            let (q, kind, env, a, b, c, d, e, n1, n2, n3, h, p, s, r) = raw
            request = q
            environment = AppStoreEnvironment(rawValue: env)
            switch kind {
            case 0:
                guard let id = a, let original = b, let source = e, let signedDate = n1 else { return nil }
                record = .transaction(
                    TransactionRow(
                        transactionId: id, originalTransactionId: original, productType: c, appAccountToken: d, source: source,
                        signedDate: signedDate, jws: PostgresHeaders.Columns(header: h, payload: p, signature: s, raw: r)
                    ))
            case 1:
                guard let original = b, let bundleId = c else { return nil }
                var subscription = LedgerSubscription(key: LedgerKey(environment, original), bundleId: bundleId)
                subscription.status = n1.map { SubscriptionStatus(rawValue: Int($0)) }
                subscription.statusSignedDate = n2.map(Date.init(epochMilliseconds:))
                subscription.statusNotificationUUID = d
                subscription.renewalSignedDate = n3.map(Date.init(epochMilliseconds:))
                record = .subscription(subscription, renewal: PostgresHeaders.Columns(header: h, payload: p, signature: s, raw: r))
            case 2:
                guard let original = b, let customer = c else { return nil }
                record = .customerLink(originalTransactionId: original, customerId: customer)
            case 3:
                guard let token = a.flatMap(LowercaseUUID.init(uuidString:)), let bundleId = b, let customer = c else { return nil }
                record = .tokenOwner(token: token, bundleId: bundleId, customerId: customer)
            case 4:
                guard let bundleId = a, let productId = b, let units = n1, let purchases = n2 else { return nil }
                record = .consumables(bundleId: bundleId, productId: productId, units: units, purchases: purchases)
            case 5:
                guard let id = a, let entitlement = b, let customer = c, let bundleId = e, let granted = n1, let expires = n2 else { return nil }
                record = .grant(
                    PromotionalGrant(
                        id: id, customer: CustomerKey(bundleId: bundleId, environment: environment, customerId: customer), entitlement: entitlement,
                        grantedAt: Date(epochMilliseconds: granted), expiresDate: Date(epochMilliseconds: expires), grantedBy: d, reason: r,
                        revokedAt: n3.map(Date.init(epochMilliseconds:)), revokedBy: p.map { String(decoding: $0, as: UTF8.self) },
                        revokeReason: s.map { String(decoding: $0, as: UTF8.self) }))
            default:
                throw StorageError("a row of an unknown kind \(kind)")
            }
        }
    }

    /// The kinds of rows: of the families `from` selects in each table (given the table and its alias, a `FROM`
    /// clause), of the token owners `owners` selects (alias `o`), and the consumables counted and the grants when given. `tagged`:
    /// the families (alias `f`) and the owners have a column `q` (which request they answer); else every row answers
    /// request 1.
    private static func rowsSQL(
        from: (String, String) -> String, owners: String, consumables: String?, grants: String? = nil, tagged: Bool = false
    ) -> String {
        let (family, owner) = tagged ? ("f.q", "o.q") : ("1::int8", "1::int8")
        let transactions = """
            SELECT \(family) AS q, 0 AS kind, t.environment AS env, t.transaction_id AS a, t.original_transaction_id AS b,
                t.product_type AS c, t.app_account_token AS d, t.source AS e, t.signed_date AS n1, t.purchase_date AS n2,
                NULL::int8 AS n3, t.jws_header AS h, t.jws_payload AS p, t.jws_signature AS s, t.jws_raw AS r
            FROM \(from("transactions", "t"))
            """
        return """
            \(transactions)
            UNION ALL
            SELECT \(family), 1, s.environment, NULL, s.original_transaction_id, s.bundle_id, s.status_notification_uuid, NULL, s.status::int8,
                s.status_signed_date, s.renewal_signed_date, s.renewal_header, s.renewal_payload, s.renewal_signature, s.renewal_raw
            FROM \(from("subscriptions", "s"))
            UNION ALL
            SELECT \(family), 2, l.environment, NULL, l.original_transaction_id, l.customer_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
            FROM \(from("customer_links", "l"))
            UNION ALL
            SELECT \(owner), 3, o.environment, o.token, o.bundle_id, o.customer_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
            FROM \(owners)
            \(consumables.map { "UNION ALL\n" + $0 } ?? "")
            \(grants.map { "UNION ALL\n" + $0 } ?? "")
            ORDER BY q, kind, env, b, n2 DESC, a DESC
            """
    }

    /// Families joined from a CTE `families (env, id)`, each looked up through its table's index by a `LATERAL`
    /// sub-query (`OFFSET 0` keeps the planner from flattening it into a join). A plain join was planned from the
    /// tables' statistics, and a prepared statement's generic plan, made while a table was small, kept scanning all of
    /// it with a hash join as it grew (seen with `auto_explain`: every transaction read for one customer); with array
    /// binds the planner also guesses the number of elements (10 for `unnest`), where a read names a few dozen keys
    /// at most.
    private static func joiningFamilies(_ table: String, _ alias: String) -> String {
        "families f CROSS JOIN LATERAL (SELECT * FROM \(table) x WHERE x.environment = f.env AND x.original_transaction_id = f.id OFFSET 0) \(alias)"
    }

    /// One family and at most one token, in scalar binds: `$1`/`$2` the family's environment and original ID, `$3`/`$4`/
    /// `$5` the token's app, environment and token (`NULL` for none). Most steps read just that (a notification's
    /// purchase and the token it carries), and a statement of scalar binds keeps one generic plan, where one of
    /// arrays is planned at every call (a generic plan guesses 10 elements for `unnest`, so PostgreSQL keeps planning
    /// for the one or two a call has).
    static let oneFamilySQL = rowsSQL(
        from: { table, alias in "\(table) \(alias) WHERE \(alias).environment = $1::text AND \(alias).original_transaction_id = $2::text" },
        owners: "token_owners o WHERE o.bundle_id = $3::text AND o.environment = $4::text AND o.token = $5::text",
        consumables: nil
    )

    /// Families and token owners named by the binds: `$1`/`$2` the families' environments and original IDs,
    /// `$3`/`$4`/`$5` the tokens' apps, environments and tokens, each looked up by index (see
    /// ``joiningFamilies(_:_:)``).
    static let familiesSQL = """
        WITH families AS (SELECT * FROM unnest($1::text[], $2::text[]) AS f(env, id))
        """ + "\n"
        + rowsSQL(
            from: joiningFamilies,
            owners: """
                unnest($3::text[], $4::text[], $5::text[]) AS k(bundle, env, token) CROSS JOIN LATERAL (
                    SELECT * FROM token_owners x WHERE x.bundle_id = k.bundle AND x.environment = k.env AND x.token = k.token OFFSET 0
                ) o
                """,
            consumables: nil
        )

    /// Customers' ledgers, each in one app and environment: request `q` is customer `$1[q]` in app `$2[q]` and
    /// environment `$3[q]`. For each: their tokens in that app and environment, and every family linked to them or
    /// carrying one of those tokens. With `countingConsumables`, as SQLite does
    /// (``LedgerStore/entitlementLedger(for:bundleId:environment:)``): the consumables linked to them are counted
    /// (kind 4), not loaded, and not loaded again through a token. Every look-up goes through an index whatever the
    /// statistics say (see ``joiningFamilies(_:_:)``).
    ///
    /// Whether a linked family is one of consumables is read from its latest transaction (a family's transactions
    /// share one product type: a consumable is a family of its own, an upgrade stays auto-renewable), in the order of
    /// its index: an `EXISTS` is planned for its first row found, which can be a sequential scan of every
    /// transaction, where reading in the index's order makes the index the cheaper way at any size but a handful of
    /// rows.
    ///
    /// The arrays are read through sub-selects (`(SELECT $1::text[])`), which the planner cannot see into: it then
    /// plans every call for the same guessed number of requests and keeps one generic plan, where with the arrays
    /// themselves it would plan again at every call for the number each call has (Benchmarks/History.md, fifth
    /// round).
    static func customerSQL(countingConsumables: Bool) -> String {
        let linked =
            countingConsumables
            ? """
            linked AS (
                SELECT r.q, r.env, l.original_transaction_id AS id, coalesce(p.product_type = 'Consumable', false) AS consumable
                FROM req r CROSS JOIN LATERAL (
                    SELECT x.original_transaction_id FROM customer_links x WHERE x.customer_id = r.customer AND x.environment = r.env OFFSET 0
                ) l LEFT JOIN LATERAL (
                    SELECT x.product_type FROM transactions x WHERE x.environment = r.env AND x.original_transaction_id = l.original_transaction_id
                    ORDER BY x.purchase_date DESC, x.transaction_id DESC LIMIT 1
                ) p ON true
            ),
            families AS (
                SELECT q, env, id FROM linked WHERE NOT consumable
                UNION
                SELECT o.q, o.environment, t.original_transaction_id FROM owned o CROSS JOIN LATERAL (
                    SELECT x.original_transaction_id, x.product_type FROM transactions x
                    WHERE x.app_account_token = o.token AND x.environment = o.environment OFFSET 0
                ) t
                WHERE NOT (t.product_type = 'Consumable'
                    AND EXISTS (SELECT 1 FROM linked k WHERE k.q = o.q AND k.consumable AND k.id = t.original_transaction_id))
            )
            """
            : """
            families AS (
                SELECT r.q, r.env, l.original_transaction_id AS id FROM req r CROSS JOIN LATERAL (
                    SELECT x.original_transaction_id FROM customer_links x WHERE x.customer_id = r.customer AND x.environment = r.env OFFSET 0
                ) l
                UNION
                SELECT o.q, o.environment, t.original_transaction_id FROM owned o CROSS JOIN LATERAL (
                    SELECT x.original_transaction_id FROM transactions x
                    WHERE x.app_account_token = o.token AND x.environment = o.environment OFFSET 0
                ) t
            )
            """
        let consumables =
            countingConsumables
            ? """
            SELECT k.q, 4, k.env, t.bundle_id, t.product_id, NULL, NULL, NULL, SUM(CASE WHEN t.revoked THEN 0 ELSE t.quantity END),
                COUNT(*), NULL, NULL, NULL, NULL, NULL
            FROM linked k CROSS JOIN LATERAL (
                SELECT x.bundle_id, x.product_id, x.product_type, x.revoked, x.quantity FROM transactions x
                WHERE x.environment = k.env AND x.original_transaction_id = k.id OFFSET 0
            ) t
            WHERE k.consumable AND t.product_type = 'Consumable'
            GROUP BY k.q, k.env, t.bundle_id, t.product_id
            """ : nil
        // The customer's promotional grants (kind 5), through their index.
        let grants = """
            SELECT r.q, 5, g.environment, g.id, g.entitlement, g.customer_id, g.granted_by, g.bundle_id, g.granted_at, g.expires_at,
                g.revoked_at, NULL, convert_to(g.revoked_by, 'UTF8'), convert_to(g.revoke_reason, 'UTF8'), g.reason
            FROM req r CROSS JOIN LATERAL (
                SELECT * FROM promotional_grants x WHERE x.customer_id = r.customer AND x.bundle_id = r.bundle AND x.environment = r.env OFFSET 0
            ) g
            """
        return """
            WITH req AS (
                SELECT r.q, r.customer, r.bundle, r.env
                FROM unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::text[])) WITH ORDINALITY AS r(customer, bundle, env, q)
            ),
            owned AS (
                SELECT r.q, r.env AS environment, x.token, r.bundle AS bundle_id, r.customer AS customer_id FROM req r CROSS JOIN LATERAL (
                    SELECT x.token FROM token_owners x
                    WHERE x.customer_id = r.customer AND x.bundle_id = r.bundle AND x.environment = r.env OFFSET 0
                ) x
            ),
            \(linked)
            """ + "\n" + rowsSQL(from: joiningFamilies, owners: "owned o", consumables: consumables, grants: grants, tagged: true)
    }

    enum FamilyRowsStatement: PreparedStatementText {
        static let name = "storekeeper_family_rows_v3"
        static let sql = familiesSQL
    }

    enum OneFamilyRowsStatement: PreparedStatementText {
        static let name = "storekeeper_one_family_rows_v2"
        static let sql = oneFamilySQL
    }

    enum CustomerRowsStatement: PreparedStatementText {
        static let name = "storekeeper_customer_rows_v5"
        static let sql = customerSQL(countingConsumables: false)
    }

    enum EntitlementRowsStatement: PreparedStatementText {
        static let name = "storekeeper_entitlement_rows_v5"
        static let sql = customerSQL(countingConsumables: true)
    }

    /// Every transaction, customer link and subscription record of `keys`, and the owners of `tokens`, in one
    /// statement (and one more for headers not yet known).
    func loadFamilies(
        _ connection: PostgresConnection, _ memo: PostgresHeaders.Memo?, _ keys: [LedgerKey], tokens: Set<AppAccountTokenKey> = [],
        into ledger: inout Ledger
    ) async throws {
        guard !keys.isEmpty || !tokens.isEmpty else { return }
        let tokens = tokens.sorted()
        var binds = PostgresBindings(capacity: 5)
        if keys.count == 1, tokens.count <= 1 {
            binds.append(keys[0].environment.rawValue)
            binds.append(keys[0].id)
            binds.append(tokens.first?.bundleId)
            binds.append(tokens.first?.environment.rawValue)
            binds.append(tokens.first?.token.description)
            return try await load(connection, memo, try await Self.rows(connection.run(OneFamilyRowsStatement.self, binds)), into: &ledger)
        }
        binds.append(keys.map(\.environment.rawValue))
        binds.append(keys.map(\.id))
        binds.append(tokens.map(\.bundleId))
        binds.append(tokens.map(\.environment.rawValue))
        binds.append(tokens.map(\.token.description))
        try await load(connection, memo, try await Self.rows(connection.run(FamilyRowsStatement.self, binds)), into: &ledger)
    }

    /// Customers' ledgers, each in one app and environment, in one statement (see ``customerSQL(countingConsumables:)``),
    /// in the order of `reads`: one statement reads one committed state, so no transaction is needed for a consistent
    /// answer.
    /// Inside a write transaction, give its `memo`: headers the transaction wrote are not committed yet, and must not
    /// reach the shared cache until it is.
    func loadCustomers(
        _ connection: PostgresConnection, _ reads: [CustomerScope], entitlementsOnly: Bool, memo: PostgresHeaders.Memo? = nil
    ) async throws -> [Ledger] {
        if let unsafeFaultInjection { for read in reads { try unsafeFaultInjection("read \(read.customerId)") } }
        var binds = PostgresBindings(capacity: 3)
        binds.append(reads.map(\.customerId))
        binds.append(reads.map(\.bundleId))
        binds.append(reads.map(\.environment.rawValue))
        let rows = try await Self.rows(
            entitlementsOnly ? connection.run(EntitlementRowsStatement.self, binds) : connection.run(CustomerRowsStatement.self, binds)
        )
        var rowsOfRead = Array(repeating: [FamilyRow](), count: reads.count)
        for row in rows {
            guard row.request >= 1, row.request <= reads.count else { throw StorageError("a row answers request \(row.request) of \(reads.count)") }
            rowsOfRead[Int(row.request) - 1].append(row)
        }
        var ledgers: [Ledger] = []
        ledgers.reserveCapacity(reads.count)
        for (read, rows) in zip(reads, rowsOfRead) {
            var ledger = Ledger()
            try await load(
                connection, memo, rows, into: &ledger,
                latestOnly: entitlementsOnly, signedData: !entitlementsOnly, consumablesOf: entitlementsOnly ? read.customerId : nil
            )
            ledgers.append(ledger)
        }
        return ledgers
    }

    /// A statement's ``FamilyRow``s.
    private static func rows(_ rows: AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow>) async throws -> [FamilyRow] {
        var decoded: [FamilyRow] = []
        for try await raw in rows {
            if let row = try FamilyRow(
                raw.decode(
                    (Int64, Int32, String, String?, String?, String?, String?, String?, Int64?, Int64?, Int64?, Int64?, Data?, Data?, String?).self
                ))
            {
                decoded.append(row)
            }
        }
        return decoded
    }

    /// Puts a statement's ``FamilyRow``s in `ledger`. With `latestOnly`, an auto-renewable
    /// subscription gets only its latest transaction (by purchase date) and the tokens of the others
    /// (``Ledger/omittedTransactionTokens``), which is all the entitlement engine and the customer view use; and no
    /// raw JWS is rebuilt (`signedData` false) when no answer needs it.
    private func load(
        _ connection: PostgresConnection, _ memo: PostgresHeaders.Memo?, _ rows: [FamilyRow],
        into ledger: inout Ledger,
        latestOnly: Bool = false, signedData: Bool = true, consumablesOf customer: String? = nil
    ) async throws {
        var transactions: [(environment: AppStoreEnvironment, row: FamilyRow.TransactionRow)] = []
        var subscriptions: [(row: LedgerSubscription, renewal: PostgresHeaders.Columns)] = []
        var latestOfFamily: [LedgerKey: Bool] = [:]
        for row in rows {
            let environment = row.environment
            switch row.record {
            case .transaction(let transaction):
                let key = LedgerKey(environment, transaction.originalTransactionId)
                // Rows come latest first within each family: a subscription's first row is the one that decides.
                if latestOnly, let isSubscription = latestOfFamily[key] {
                    if isSubscription {
                        if let token = transaction.appAccountToken.flatMap(LowercaseUUID.init(uuidString:)) {
                            ledger.omittedTransactionTokens[key, default: []].insert(token)
                        }
                        continue
                    }
                } else {
                    latestOfFamily[key] = transaction.productType == ProductType.autoRenewable.rawValue
                }
                transactions.append((environment, transaction))
            case .subscription(let subscription, let renewal):
                subscriptions.append((subscription, renewal))
            case .customerLink(let original, let customer):
                ledger.explicitLinks[LedgerKey(environment, original)] = customer
            case .tokenOwner(let token, let bundleId, let customer):
                ledger.tokenOwners[AppAccountTokenKey(bundleId: bundleId, environment: environment, token: token)] = customer
            case .consumables(let bundleId, let productId, let units, let purchases):
                if let customer {
                    let key = ConsumableTotalKey(customerId: customer, environment: environment, bundleId: bundleId, productId: productId)
                    ledger.consumableTotals[key] = ConsumableTotal(units: Int(units), purchases: Int(purchases))
                }
            case .grant(let grant):
                ledger.grants[grant.id] = grant
            }
        }
        var references = Set<Int64>()
        for (_, row) in transactions { references.formUnion(headers.references(row.jws)) }
        for subscription in subscriptions { references.formUnion(headers.references(subscription.renewal)) }
        try await headers.load(references, connection, memo)

        let decoder = AppStoreJSON.makeDecoder()
        for (environment, row) in transactions {
            guard let payload = try headers.payload(row.jws, memo), let jws = signedData ? try headers.jws(row.jws, memo) : "" else {
                throw StorageError("transaction \(row.transactionId) has no stored JWS")
            }
            ledger.transactions[LedgerKey(environment, row.transactionId)] = LedgerTransaction(
                info: try TransactionInfo(json: payload, fallback: decoder),
                signedDate: Date(epochMilliseconds: row.signedDate), source: row.source, jws: jws
            )
        }
        for subscription in subscriptions {
            var record = subscription.row
            if let payload = try headers.payload(subscription.renewal, memo) {
                record.renewalInfo = try RenewalInfo(json: payload, fallback: decoder)
                if signedData { record.renewalJWS = try headers.jws(subscription.renewal, memo) }
            }
            ledger.subscriptions[record.key] = record
        }
    }
}

extension PostgresConnection {
    /// Runs one statement; its rows can be iterated or discarded. (The store logs its own failures, once, with
    /// context; postgres-nio's per-query logging stays off.)
    func run(_ query: PostgresQuery) async throws -> PostgresRowSequence {
        try await self.query(query, logger: Self.quiet)
    }

    /// Runs one statement and reads its result to the end, so that an error the server sends while executing it
    /// (a deadlock found while waiting for a lock, say) is thrown here, not lost with rows nobody reads.
    func execute(_ query: PostgresQuery) async throws {
        for try await _ in try await self.query(query, logger: Self.quiet) {}
    }

    static let quiet = Logger(label: "storekeeper.postgres.query", factory: { _ in SwiftLogNoOpLogHandler() })
}
