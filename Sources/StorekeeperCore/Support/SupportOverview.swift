package import AppStoreModels
package import Foundation

/// The figures of an app's overview, as a support dashboard shows them: who subscribes now (by product), trials, billing
/// retry and grace, and over the last 30 days renewals, trial conversions, churn, refunds, revenue by currency
/// (from the App Store's transaction prices) and purchases per day. Computed from the ledger by two queries each
/// backend runs (``Queries``), aggregated here.
package struct SupportOverview: Sendable, Hashable, Encodable {
    package var bundleId: String
    package var environment: AppStoreEnvironment
    package var since: Date
    package var now: Date
    /// Subscriptions with access now (active or in the grace period), by product.
    package var activeByProduct: [String: Int] = [:]
    /// Of those, in a free trial.
    package var trials = 0
    package var billingRetry = 0
    package var gracePeriod = 0
    /// Over the window: renewals (paid periods after the first), of which the first paid period after a free trial.
    package var renewals = 0
    package var trialConversions = 0
    /// Free trials that ended in the window without a paid period.
    package var trialsLapsed = 0
    /// Subscriptions that expired in the window and did not come back.
    package var churned = 0
    /// First purchases (of any product) in the window.
    package var newPurchases = 0
    /// Purchases refunded in the window.
    package var refunds = 0
    /// Revenue of the window's purchases not refunded, by currency, in milliunits (as Apple's prices are: 9990 is 9.99).
    package var revenue: [String: Int64] = [:]
    /// Purchases (first and renewals) per day of the window, oldest first.
    package var purchasesPerDay: [Int] = []

    package var active: Int { activeByProduct.values.reduce(0, +) }

    private enum CodingKeys: String, CodingKey {
        case bundleId, environment, since, now, active, activeByProduct, trials, billingRetry, gracePeriod, renewals, trialConversions
        case trialsLapsed, trialConversionRate, churned, newPurchases, refunds, revenue, purchasesPerDay
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(bundleId, forKey: .bundleId)
        try container.encode(environment, forKey: .environment)
        try container.encode(since, forKey: .since)
        try container.encode(now, forKey: .now)
        try container.encode(active, forKey: .active)
        try container.encode(activeByProduct, forKey: .activeByProduct)
        try container.encode(trials, forKey: .trials)
        try container.encode(billingRetry, forKey: .billingRetry)
        try container.encode(gracePeriod, forKey: .gracePeriod)
        try container.encode(renewals, forKey: .renewals)
        try container.encode(trialConversions, forKey: .trialConversions)
        try container.encode(trialsLapsed, forKey: .trialsLapsed)
        try container.encodeIfPresent(trialConversionRate, forKey: .trialConversionRate)
        try container.encode(churned, forKey: .churned)
        try container.encode(newPurchases, forKey: .newPurchases)
        try container.encode(refunds, forKey: .refunds)
        try container.encode(revenue, forKey: .revenue)
        try container.encode(purchasesPerDay, forKey: .purchasesPerDay)
    }

    /// Of the trials that ended in the window, the part that became paid (nil when none ended).
    package var trialConversionRate: Double? {
        trialConversions + trialsLapsed == 0 ? nil : Double(trialConversions) / Double(trialConversions + trialsLapsed)
    }

    package init(bundleId: String, environment: AppStoreEnvironment, since: Date, now: Date) {
        self.bundleId = bundleId
        self.environment = environment
        self.since = since
        self.now = now
        purchasesPerDay = Array(repeating: 0, count: max(1, Int(now.timeIntervalSince(since) / 86_400)))
    }

    /// One group of subscriptions (``Queries/subscriptions``): their latest transaction's product, their status, whether
    /// that transaction is a free trial, whether it has expired, and whether it expired in the window.
    package struct SubscriptionGroup: Sendable {
        package var productId: String
        package var status: Int?
        package var freeTrial: Bool
        package var expired: Bool
        package var endedInWindow: Bool
        package var count: Int

        package init(productId: String, status: Int?, freeTrial: Bool, expired: Bool, endedInWindow: Bool, count: Int) {
            self.productId = productId
            self.status = status
            self.freeTrial = freeTrial
            self.expired = expired
            self.endedInWindow = endedInWindow
            self.count = count
        }
    }

    /// One transaction bought or refunded in the window (``Queries/window``).
    package struct WindowTransaction: Sendable {
        package var renewal: Bool
        package var purchaseDate: Date
        package var revocationDate: Date?
        /// Milliunits.
        package var price: Int64?
        package var currency: String?
        /// Whether the family's transaction before this one was a free trial.
        package var afterFreeTrial: Bool

        package init(renewal: Bool, purchaseDate: Date, revocationDate: Date?, price: Int64?, currency: String?, afterFreeTrial: Bool) {
            self.renewal = renewal
            self.purchaseDate = purchaseDate
            self.revocationDate = revocationDate
            self.price = price
            self.currency = currency
            self.afterFreeTrial = afterFreeTrial
        }
    }

    /// Adds a group: the App Store's status decides (a subscription without one, known only from transactions, is
    /// active until its expiry).
    package mutating func add(_ group: SubscriptionGroup) {
        let status = group.status ?? (group.expired ? 2 : 1)
        switch status {
        case 1:
            activeByProduct[group.productId, default: 0] += group.count
            if group.freeTrial { trials += group.count }
        case 3:
            billingRetry += group.count
        case 4:
            gracePeriod += group.count
            activeByProduct[group.productId, default: 0] += group.count
        case 2 where group.endedInWindow:
            if group.freeTrial { trialsLapsed += group.count } else { churned += group.count }
        default:
            break
        }
    }

    package mutating func add(_ transaction: WindowTransaction) {
        if let revoked = transaction.revocationDate, revoked > since, revoked <= now { refunds += 1 }
        guard transaction.purchaseDate > since, transaction.purchaseDate <= now else { return }
        if transaction.renewal {
            renewals += 1
            if transaction.afterFreeTrial { trialConversions += 1 }
        } else {
            newPurchases += 1
        }
        let day = min(purchasesPerDay.count - 1, max(0, Int(transaction.purchaseDate.timeIntervalSince(since) / 86_400)))
        purchasesPerDay[day] += 1
        if transaction.revocationDate == nil, let price = transaction.price, let currency = transaction.currency {
            revenue[currency, default: 0] += price
        }
    }

    /// The two queries, in a backend's SQL: `json(table, field, numeric)` reads a field of a transaction's stored
    /// payload (as a number when `numeric`), `parameter(n)` is the n-th parameter (1: bundle ID, 2: environment, 3: the
    /// window's start, 4: its end, in epoch milliseconds); `byDate` and `refunds` follow `FROM transactions t` where
    /// the window's purchases and the app's refunds are read (SQLite's `INDEXED BY`: its planner prefers an equality on
    /// the environment to a range of dates).
    package struct Queries: Sendable {
        package var subscriptions: String
        package var window: String

        package init(json: (String, String, Bool) -> String, parameter: (Int) -> String, byDate: String = "", refunds: String = "") {
            let (bundle, environment, since, now) = (parameter(1), parameter(2), parameter(3), parameter(4))
            let expires = json("t", "expiresDate", true)
            // Each subscription's latest transaction (by the index reads use), grouped.
            subscriptions = """
                SELECT t.product_id, s.status,
                    CASE WHEN \(json("t", "offerDiscountType", false)) = 'FREE_TRIAL' THEN 1 ELSE 0 END AS trial,
                    CASE WHEN \(expires) <= \(now) THEN 1 ELSE 0 END AS expired,
                    CASE WHEN \(expires) > \(since) AND \(expires) <= \(now) THEN 1 ELSE 0 END AS ended,
                    COUNT(*) AS n
                FROM subscriptions s JOIN transactions t ON t.environment = s.environment AND t.transaction_id = (
                    SELECT l.transaction_id FROM transactions l
                    WHERE l.environment = s.environment AND l.original_transaction_id = s.original_transaction_id
                    ORDER BY l.purchase_date DESC, l.transaction_id DESC LIMIT 1)
                WHERE s.bundle_id = \(bundle) AND s.environment = \(environment)
                GROUP BY t.product_id, s.status, trial, expired, ended
                """
            // The app's transactions bought or refunded in the window (by the purchase-date index and the partial index
            // of refunds: no scan of the app's history); for a renewal, whether the one before it was a free trial (0
            // when the ledger has none before it: an app that submitted its latest renewal only).
            let columns = """
                CASE WHEN t.transaction_id <> t.original_transaction_id THEN 1 ELSE 0 END AS renewal, t.purchase_date,
                    \(json("t", "revocationDate", true)) AS revoked_at, \(json("t", "price", true)) AS price,
                    \(json("t", "currency", false)) AS currency,
                    CASE WHEN t.transaction_id <> t.original_transaction_id AND t.purchase_date > \(since) THEN COALESCE((
                        SELECT CASE WHEN \(json("p", "offerDiscountType", false)) = 'FREE_TRIAL' THEN 1 ELSE 0 END FROM transactions p
                        WHERE p.environment = t.environment AND p.original_transaction_id = t.original_transaction_id
                            AND p.purchase_date < t.purchase_date
                        ORDER BY p.purchase_date DESC, p.transaction_id DESC LIMIT 1), 0) ELSE 0 END AS after_trial
                """
            window = """
                SELECT \(columns) FROM transactions t \(byDate)
                WHERE t.purchase_date > \(since) AND t.purchase_date <= \(now) AND t.environment = \(environment) AND t.bundle_id = \(bundle)
                UNION ALL
                SELECT \(columns) FROM transactions t \(refunds)
                WHERE t.environment = \(environment) AND t.bundle_id = \(bundle) AND t.revoked
                    AND NOT (t.purchase_date > \(since) AND t.purchase_date <= \(now))
                """
        }
    }
}
