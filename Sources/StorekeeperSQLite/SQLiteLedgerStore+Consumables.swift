import AppStoreModels
import GRDB
import StorekeeperCore

extension SQLiteLedgerStore {
    /// The customer's families and tokens as ``customerFamilies`` finds them, with the consumable purchases of the
    /// families linked to the customer counted by the database instead of listed: a game's customer can have
    /// thousands, and loading each one (4 statements and a JSON decode) would make a read's cost grow with them
    /// (Benchmarks/History.md, "Entitlement reads"). A linked family is the customer's whatever its tokens say
    /// (``Ledger/customer(of:)`` looks at the explicit link first), so counting it here cannot attribute it
    /// differently; consumables that reach the customer only through a token are still loaded one by one.
    ///
    /// Families are returned in two sets: those linked to the customer (their link is known, no need to read it
    /// again) and the others that carry one of the customer's tokens.
    func customerFamiliesCountingConsumables(
        _ db: Database, _ customerId: String, _ bundleId: String, _ environment: AppStoreEnvironment
    ) throws -> (tokens: [AppAccountTokenKey], linked: Set<String>, byToken: Set<String>, consumables: [ConsumableTotalKey: ConsumableTotal]) {
        let arguments: StatementArguments = [customerId, environment.rawValue]
        let tokens = try customerTokens(db, customerId, bundleId, environment)
        var linked = Set<String>()
        var anyConsumable = false
        for row in try Row.fetchAll(db.cachedStatement(sql: Self.linkedFamiliesSQL), arguments: arguments) {
            if row["consumable"] as Bool { anyConsumable = true } else { linked.insert(row["original"]) }
        }
        var byToken = Set<String>()
        for token in tokens {
            byToken.formUnion(
                try String.fetchAll(
                    db.cachedStatement(sql: Self.tokenFamiliesNotCountedSQL), arguments: [token.token.description, environment.rawValue, customerId]
                ))
        }
        byToken.subtract(linked)
        var totals: [ConsumableTotalKey: ConsumableTotal] = [:]
        // Only when there is something to sum: most customers have no consumable, and a statement costs.
        for row in try anyConsumable ? Row.fetchAll(db.cachedStatement(sql: Self.linkedConsumablesSQL), arguments: arguments) : [] {
            let key = ConsumableTotalKey(
                customerId: customerId, environment: environment, bundleId: row["bundle_id"] ?? "", productId: row["product_id"])
            totals[key] = ConsumableTotal(units: row["units"], purchases: row["purchases"])
        }
        return (tokens, linked, byToken, totals)
    }

    /// The families linked to customer `?1` in environment `?2`, each with whether it holds a consumable.
    static let linkedFamiliesSQL = """
        SELECT l.original_transaction_id AS original, EXISTS (
            SELECT 1 FROM transactions t
            WHERE t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id AND t.product_type = 'Consumable'
        ) AS consumable
        FROM customer_links l
        WHERE l.customer_id = ?1 AND l.environment = ?2
        """

    /// The consumables of the families linked to customer `?1` in environment `?2`, by app and product: units not
    /// refunded, and purchases.
    static let linkedConsumablesSQL = """
        SELECT t.bundle_id, t.product_id, SUM(CASE WHEN t.revoked THEN 0 ELSE t.quantity END) AS units, COUNT(*) AS purchases
        FROM customer_links l
        CROSS JOIN transactions t ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
        WHERE l.customer_id = ?1 AND l.environment = ?2 AND t.product_type = 'Consumable'
        GROUP BY t.bundle_id, t.product_id
        """
    // CROSS JOIN keeps the customer's links as the outer loop: left to itself, the planner read every consumable of
    // the environment and looked each one's link up.

    /// The families carrying app account token `?1` in environment `?2`, but for consumables linked to customer
    /// `?3` (counted above).
    static let tokenFamiliesNotCountedSQL = """
        SELECT t.original_transaction_id FROM transactions t
        WHERE t.app_account_token = ?1 AND t.environment = ?2 AND NOT (t.product_type = 'Consumable' AND EXISTS (
            SELECT 1 FROM customer_links l
            WHERE l.environment = t.environment AND l.original_transaction_id = t.original_transaction_id AND l.customer_id = ?3))
        """
}
