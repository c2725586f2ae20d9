package import AppStoreModels
package import AppStoreSigning
package import Foundation

/// What Storekeeper knows about every purchase, as one value: the reference model of the ledger that storage
/// backends persist, with the rules that make it a faithful cache of the App Store (DESIGN rules 2-5):
///
/// - a notification is applied once (by `notificationUUID`);
/// - each transaction, status and renewal info keeps its newest signed version: older data never overwrites newer
///   data, and ties are broken on the content, so any order of the same inputs gives the same ledger;
/// - every record is keyed by environment and ID; sandbox never touches production;
/// - customers are linked through `appAccountToken` or an explicit submission from the app; a token belongs to one
///   customer within one app and environment, and a submission never takes a purchase or a token from the customer
///   who has it (`link(_:to:)` refuses with an ``OwnershipConflict``).
package struct Ledger: Codable, Hashable, Sendable {
    package var transactions: [LedgerKey: LedgerTransaction] = [:]
    package var subscriptions: [LedgerKey: LedgerSubscription] = [:]
    package var notifications: [String: LedgerNotification] = [:]
    /// Customer of a transaction's original transaction ID, when the app linked it explicitly.
    package var explicitLinks: [LedgerKey: String] = [:]
    /// Customer of an app account token, per app and environment.
    package var tokenOwners: [AppAccountTokenKey: String] = [:]
    /// For a partial ledger (``LedgerStore/entitlementLedger(for:environment:)``): the app account tokens carried by
    /// transactions of a subscription that it leaves out. Attribution consults them as it does the held ones.
    package var omittedTransactionTokens: [LedgerKey: Set<LowercaseUUID>] = [:]
    /// For a partial ledger: consumable purchases counted by the store instead of held as transactions, attributed
    /// as ``customer(of:)`` attributes them (the explicit link, else the transaction's token's owner).
    package var consumableTotals: [ConsumableTotalKey: ConsumableTotal] = [:]
    /// Promotional entitlements support granted (revoked and expired ones too), by grant ID: a customer's ledger holds
    /// theirs in the app and environment it was read for.
    package var grants: [String: PromotionalGrant] = [:]

    package init() {}

    // MARK: - Applying verified data

    /// Applies a verified notification and what it carries. Returns `false` for a duplicate (nothing changes).
    @discardableResult
    package mutating func apply(_ notification: VerifiedNotification) -> Bool {
        let payload = notification.payload
        guard notifications[payload.notificationUUID] == nil else { return false }
        let environment = payload.data?.environment ?? payload.summary?.environment ?? payload.appData?.environment
        var outcome = ApplyOutcome.recorded
        if let transaction = notification.transaction {
            apply(transaction.payload, jws: transaction.jws, source: payload.notificationUUID)
            outcome = .applied
        }
        if let renewal = notification.renewalInfo {
            apply(renewal.payload, jws: renewal.jws, bundleId: payload.data?.bundleId ?? "")
            outcome = .applied
        }
        if let status = payload.data?.status, let transaction = notification.transaction?.payload {
            apply(status: status, of: transaction, signedDate: payload.signedDate, source: payload.notificationUUID)
        }
        notifications[payload.notificationUUID] = LedgerNotification(
            notificationUUID: payload.notificationUUID, notificationType: payload.notificationType, subtype: payload.subtype,
            signedDate: payload.signedDate, environment: environment, outcome: outcome,
            signedPayload: notification.notification.jws
        )
        return true
    }

    /// Applies a subscription's status (`data.status` of a notification, or a status from Get All Subscription
    /// Statuses), keeping the one signed last; `source` is the notification's UUID, or ``apiSource``, and breaks ties.
    package mutating func apply(status: SubscriptionStatus, of transaction: TransactionInfo, signedDate: Date?, source: String) {
        guard let environment = transaction.environment else { return }
        let key = LedgerKey(environment, transaction.originalTransactionId)
        var subscription = subscriptions[key] ?? LedgerSubscription(key: key, bundleId: transaction.bundleId)
        let incoming = (signedDate ?? .distantPast, source)
        let current = (subscription.statusSignedDate ?? .distantPast, subscription.statusNotificationUUID ?? "")
        if subscription.status == nil || incoming > current {
            subscription.status = status
            subscription.statusSignedDate = signedDate
            subscription.statusNotificationUUID = source
        }
        subscriptions[key] = subscription
    }

    /// The source of records that came from the App Store Server API (reconciliation), not a notification or the app.
    package static let apiSource = "app-store-server-api"

    /// Applies a verified transaction (from a notification, the app, or the API), keeping the newest version.
    package mutating func apply(_ info: TransactionInfo, jws: String, source: String) {
        guard let environment = info.environment else { return }
        let key = LedgerKey(environment, info.transactionId)
        let signedDate = info.signedDate ?? .distantPast
        if let existing = transactions[key], !Self.isNewer((signedDate, jws), than: (existing.signedDate, existing.jws)) {
            return
        }
        transactions[key] = LedgerTransaction(info: info, signedDate: signedDate, source: source, jws: jws)
        if info.type == .autoRenewable, subscriptions[LedgerKey(environment, info.originalTransactionId)] == nil {
            let subscriptionKey = LedgerKey(environment, info.originalTransactionId)
            subscriptions[subscriptionKey] = LedgerSubscription(key: subscriptionKey, bundleId: info.bundleId)
        }
    }

    /// Applies a verified renewal info, keeping the newest version.
    package mutating func apply(_ info: RenewalInfo, jws: String, bundleId: String) {
        guard let environment = info.environment else { return }
        let key = LedgerKey(environment, info.originalTransactionId)
        var subscription = subscriptions[key] ?? LedgerSubscription(key: key, bundleId: bundleId)
        let signedDate = info.signedDate ?? .distantPast
        if subscription.renewalInfo == nil
            || Self.isNewer((signedDate, jws), than: (subscription.renewalSignedDate ?? .distantPast, subscription.renewalJWS ?? ""))
        {
            subscription.renewalInfo = info
            subscription.renewalSignedDate = signedDate
            subscription.renewalJWS = jws
        }
        subscriptions[key] = subscription
    }

    /// Links a transaction (and its whole subscription or purchase) to a customer, as the app submitting it does,
    /// and remembers its app account token as theirs in its app and environment. Refused, changing nothing, when the
    /// token or the purchase already belongs to another customer (``ownershipConflict(linking:to:)``).
    /// A token in `erased` (retired by a customer's erasure) is not taken: the purchase is linked alone, and the other
    /// purchases carrying that token stay without a customer.
    package mutating func link(
        _ info: TransactionInfo, to customerId: String, erased: Set<AppAccountTokenKey> = []
    ) throws(OwnershipConflict) {
        guard let environment = info.environment else { return }
        if let conflict = ownershipConflict(linking: info, to: customerId) { throw conflict }
        explicitLinks[LedgerKey(environment, info.originalTransactionId)] = customerId
        if let token = info.appAccountToken {
            let key = AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: token)
            if !erased.contains(key) { tokenOwners[key] = customerId }
        }
    }

    /// Moves a purchase (every transaction of its original transaction ID, and its future renewals) to `customerId`
    /// by an explicit link, which attribution consults before any token; the tokens stay their owners' (their other
    /// purchases stay theirs). The ``RestorePolicy/transfer`` policy's move.
    /// A token without an owner is taken, unless in `erased` (as ``link(_:to:erased:)``).
    package mutating func transfer(_ info: TransactionInfo, to customerId: String, erased: Set<AppAccountTokenKey> = []) {
        guard let environment = info.environment else { return }
        explicitLinks[LedgerKey(environment, info.originalTransactionId)] = customerId
        if let token = info.appAccountToken {
            let key = AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: token)
            if tokenOwners[key] == nil, !erased.contains(key) { tokenOwners[key] = customerId }
        }
    }

    /// Why linking `info` to `customerId` would move something from another customer, or `nil` when it would not:
    /// its app account token belongs to someone else in its app and environment, or its purchase (every transaction
    /// of its original transaction ID, and its renewal info) is already someone else's, by an explicit link or a token.
    /// The rows ``LedgerStore/submit(_:customerId:)`` loads (the family and the owners of its tokens) are enough.
    package func ownershipConflict(linking info: TransactionInfo, to customerId: String) -> OwnershipConflict? {
        guard let environment = info.environment else { return nil }
        if let token = info.appAccountToken,
            let owner = tokenOwners[AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: token)], owner != customerId
        {
            return OwnershipConflict(
                .appAccountToken,
                "app account token \(token) already belongs to another customer of \(info.bundleId) in \(environment.rawValue); "
                    + "a token is one customer's, and a purchase carrying it is theirs"
            )
        }
        let family = LedgerKey(environment, info.originalTransactionId)
        let refused = OwnershipConflict(
            .purchase,
            "the purchase with original transaction ID \(info.originalTransactionId) already belongs to another customer of "
                + "\(info.bundleId) in \(environment.rawValue)"
        )
        if let linked = explicitLinks[family] { return linked == customerId ? nil : refused }
        for transaction in transactions.values
        where transaction.info.originalTransactionId == info.originalTransactionId && transaction.info.environment == environment {
            if let owner = customer(of: transaction), owner != customerId { return refused }
        }
        let familyTokens = omittedTransactionTokens[family, default: []].union(
            [subscriptions[family]?.renewalInfo?.appAccountToken].compactMap { $0 })
        for token in familyTokens {
            if let owner = tokenOwners[AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: token)], owner != customerId {
                return refused
            }
        }
        return nil
    }

    /// Newer signed date wins; on a tie, the larger content, so the result does not depend on arrival order.
    static func isNewer(_ incoming: (Date, String), than existing: (Date, String)) -> Bool {
        incoming.0 != existing.0 ? incoming.0 > existing.0 : incoming.1 > existing.1
    }

    // MARK: - Reading

    /// The customer a transaction belongs to: an explicit link of its original transaction, else the owner of its
    /// (or its subscription's) app account token in its app and environment.
    package func customer(of transaction: LedgerTransaction) -> String? {
        let info = transaction.info
        let environment = info.environment ?? .production
        let original = LedgerKey(environment, info.originalTransactionId)
        if let linked = explicitLinks[original] { return linked }
        func owner(_ token: LowercaseUUID?) -> String? {
            token.flatMap { tokenOwners[AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: $0)] }
        }
        if let owner = owner(info.appAccountToken) { return owner }
        for other in transactions.values
        where other.info.originalTransactionId == info.originalTransactionId
            && other.info.environment == info.environment
        {
            if let owner = owner(other.info.appAccountToken) { return owner }
        }
        for token in omittedTransactionTokens[original, default: []].sorted(by: { $0.description < $1.description }) {
            if let owner = owner(token) { return owner }
        }
        return owner(subscriptions[original]?.renewalInfo?.appAccountToken)
    }

    /// A customer's transactions in an environment.
    package func transactions(of customerId: String, environment: AppStoreEnvironment) -> [LedgerTransaction] {
        transactions.values.filter { $0.info.environment == environment && customer(of: $0) == customerId }
            .sorted { ($0.info.purchaseDate, $0.info.transactionId) < ($1.info.purchaseDate, $1.info.transactionId) }
    }

}
