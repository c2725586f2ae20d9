package import AppStoreModels
package import Foundation
import GRDB
package import StorekeeperCore

extension SQLiteLedgerStore {
    package func supportLookup(_ lookup: SupportLookup, in apps: [VerifierKey]) async throws(StorageError) -> Ledger {
        try await read { db in
            var families = Set<LedgerKey>()
            for environment in Set(apps.map(\.environment)) {
                let (sql, value): (String, String)
                switch lookup {
                case .transactionId(let id):
                    sql = "SELECT original_transaction_id FROM transactions WHERE environment = ? AND transaction_id = ?"
                    value = id
                case .originalTransactionId(let id):
                    sql = "SELECT DISTINCT original_transaction_id FROM transactions WHERE environment = ? AND original_transaction_id = ?"
                    value = id
                case .appAccountToken(let token):
                    sql = "SELECT DISTINCT original_transaction_id FROM transactions WHERE app_account_token = ?2 AND environment = ?1"
                    value = token.description
                }
                for original in try String.fetchAll(db.cachedStatement(sql: sql), arguments: [environment.rawValue, value]) {
                    families.insert(LedgerKey(environment, original))
                }
            }
            var ledger = Ledger()
            for family in families.sorted() { try self.loadSubscriptionFamily(db, nil, family, into: &ledger) }
            // The owners of the tokens that may name the purchases' customers, and of the token searched for.
            let tokens = ledger.tokensNamingOwners(searched: lookup, in: apps)
            for token in tokens.sorted() {
                if let owner = try String.fetchOne(
                    db.cachedStatement(sql: "SELECT customer_id FROM token_owners WHERE bundle_id = ? AND environment = ? AND token = ?"),
                    arguments: [token.bundleId, token.environment.rawValue, token.token.description])
                {
                    ledger.tokenOwners[token] = owner
                }
            }
            return ledger
        }
    }
}

extension SQLiteLedgerStore {
    package func recordSupportAction(_ action: SupportAction) async throws(StorageError) -> Int64 {
        try await write { db, _ in try Self.insert(action, db) }
    }

    package func recordSupportAction(_ action: SupportAction, unlessDoneSince since: Date) async throws(StorageError) -> SupportActionClaim {
        // One writer: the look and the append are one transaction no other write enters.
        try await write { db, _ in
            if let done = try Int64.fetchOne(
                db,
                sql: """
                    SELECT max(at) FROM support_actions WHERE bundle_id = ? AND environment = ? AND customer_id = ? AND action = ?
                    AND target IS ? AND outcome = 'done' AND at >= ?
                    """,
                arguments: [
                    action.customer.bundleId, action.customer.environment.rawValue, action.customer.customerId, action.action, action.target,
                    since.epochMilliseconds,
                ])
            {
                return .alreadyDone(at: Date(epochMilliseconds: done))
            }
            return .recorded(try Self.insert(action, db))
        }
    }

    /// Appends `action` to the audit log; its ID.
    static func insert(_ action: SupportAction, _ db: Database) throws -> Int64 {
        try db.cachedStatement(
            sql: """
                INSERT INTO support_actions (at, key_name, bundle_id, environment, customer_id, action, target, request, outcome, detail)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            action.at.epochMilliseconds, action.keyName, action.customer.bundleId, action.customer.environment.rawValue,
            action.customer.customerId, action.action, action.target, SupportAction.text(action.request), action.outcome,
            SupportAction.text(action.detail),
        ])
        return db.lastInsertedRowID
    }

    package func supportActions(customer: CustomerKey) async throws(StorageError) -> [SupportAction] {
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT * FROM support_actions WHERE bundle_id = ? AND environment = ? AND customer_id = ? ORDER BY id"),
                arguments: [customer.bundleId, customer.environment.rawValue, customer.customerId]
            ).map(Self.supportAction)
        }
    }

    package func supportActions(target: String, environment: AppStoreEnvironment) async throws(StorageError) -> [SupportAction] {
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: "SELECT * FROM support_actions WHERE environment = ? AND target = ? ORDER BY id"),
                arguments: [environment.rawValue, target]
            ).map(Self.supportAction)
        }
    }

    static func supportAction(_ row: Row) -> SupportAction {
        SupportAction(
            id: row["id"], at: Date(epochMilliseconds: row["at"]), keyName: row["key_name"],
            customer: CustomerKey(
                bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), customerId: row["customer_id"]),
            action: row["action"], target: row["target"], request: SupportAction.object(row["request"]), outcome: row["outcome"],
            detail: SupportAction.object(row["detail"]))
    }
}

extension SQLiteLedgerStore {
    /// The overview's queries in SQLite's SQL: a payload's fields by `json_extract` (a transaction kept raw, whose parts
    /// were not canonical base64url, has none: rare, and left out of the figures).
    static let overviewQueries = SupportOverview.Queries(
        json: { table, field, _ in "json_extract(CAST(\(table).jws_payload AS TEXT), '$.\(field)')" }, parameter: { "?\($0)" },
        byDate: "INDEXED BY transactions_by_purchase_date", refunds: "INDEXED BY transactions_refunded")

    package func overview(_ app: VerifierKey, since: Date, now: Date) async throws(StorageError) -> SupportOverview {
        try await read { db in
            var overview = SupportOverview(bundleId: app.bundleId, environment: app.environment, since: since, now: now)
            let arguments: StatementArguments = [app.bundleId, app.environment.rawValue, since.epochMilliseconds, now.epochMilliseconds]
            for row in try Row.fetchAll(db, sql: Self.overviewQueries.subscriptions, arguments: arguments) {
                overview.add(
                    SupportOverview.SubscriptionGroup(
                        productId: row["product_id"], status: row["status"], freeTrial: row["trial"] == 1, expired: row["expired"] == 1,
                        endedInWindow: row["ended"] == 1, count: row["n"]))
            }
            let cursor = try Row.fetchCursor(db, sql: Self.overviewQueries.window, arguments: arguments)
            while let row = try cursor.next() {
                overview.add(
                    SupportOverview.WindowTransaction(
                        renewal: row["renewal"] == 1, purchaseDate: Date(epochMilliseconds: row["purchase_date"]),
                        revocationDate: (row["revoked_at"] as Int64?).map(Date.init(epochMilliseconds:)), price: row["price"],
                        currency: row["currency"], afterFreeTrial: (row["after_trial"] as Int?) == 1))
            }
            return overview
        }
    }
}
