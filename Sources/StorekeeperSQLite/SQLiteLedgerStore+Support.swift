package import AppStoreModels
import Foundation
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
        try await write { db, _ in
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
