import AppStoreModels
import GRDB
import StorekeeperCore

extension SQLiteLedgerStore {
    /// The customer's families and tokens as ``customerFamilies`` finds them, with the consumable purchases of the
    /// families linked to the customer counted instead of listed: a game's customer can have thousands, and loading
    /// each one (4 statements and a JSON decode) made a read's cost grow with them (BENCHMARKS.md). A linked family
    /// is the customer's whatever its tokens say (``Ledger/customer(of:)`` looks at the explicit link first), so
    /// counting it here cannot attribute it differently; consumables that reach the customer only through a token
    /// are still loaded one by one.
    func customerFamiliesCountingConsumables(
        _ db: Database, _ customerId: String, _ environment: AppStoreEnvironment
    ) throws -> (tokens: Set<String>, originals: Set<String>, consumables: [ConsumableTotalKey: ConsumableTotal]) {
        let tokens = try String.fetchAll(db.cachedStatement(sql: "SELECT token FROM tokens WHERE customer_id = ?"), arguments: [customerId])
        var originals = Set<String>()
        var counted = Set<String>()
        var totals: [ConsumableTotalKey: ConsumableTotal] = [:]
        for row in try Row.fetchAll(db.cachedStatement(sql: Self.linkedFamiliesSQL), arguments: [customerId, environment.rawValue]) {
            let original: String = row["original"]
            guard let productId = row["product_id"] as String? else {
                originals.insert(original)
                continue
            }
            counted.insert(original)
            let key = ConsumableTotalKey(customerId: customerId, environment: environment, bundleId: row["bundle_id"] ?? "", productId: productId)
            var total = totals[key] ?? ConsumableTotal(units: 0, purchases: 0)
            total.purchases += 1
            if !(row["revoked"] as Bool) { total.units += row["quantity"] as Int }
            totals[key] = total
        }
        for token in tokens {
            originals.formUnion(try String.fetchAll(db.cachedStatement(sql: Self.familiesByTokenSQL), arguments: [token, environment.rawValue]))
        }
        originals.subtract(counted)
        return (Set(tokens), originals, totals)
    }

    /// The families linked to customer `?1` in environment `?2`: one row with empty product columns for each family
    /// that holds no consumable, and one row per consumable transaction (product, app, refunded, quantity) otherwise.
    static let linkedFamiliesSQL = """
        SELECT l.original_transaction_id AS original, t.product_id AS product_id,
            json_extract(t.info, '$.bundleId') AS bundle_id,
            json_extract(t.info, '$.revocationDate') IS NOT NULL AS revoked,
            COALESCE(json_extract(t.info, '$.quantity'), 1) AS quantity
        FROM customer_links l
        LEFT JOIN transactions t ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
            AND t.product_type = 'Consumable'
        WHERE l.customer_id = ?1 AND l.environment = ?2
        """
}
