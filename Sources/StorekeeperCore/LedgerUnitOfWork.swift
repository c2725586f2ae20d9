public import AppStoreModels
public import AppStoreSigning

/// The rows one write of the ledger reads and writes, inside one of the backend's transactions. Core decides what to
/// load, applies the ``Ledger`` rules and says what to write (``LedgerChanges``); a backend only runs these row
/// operations, so that SQLite, PostgreSQL, a job or a replay command cannot differ in the rules.
public protocol LedgerWriteTransaction {
    /// Whether the ledger holds a notification with this UUID.
    func notificationExists(_ uuid: String) throws -> Bool
    /// Every transaction of one original transaction ID, its customer link and its subscription record, into `ledger`.
    func loadFamily(_ key: LedgerKey, into ledger: inout Ledger) throws
    /// The owners of `tokens` that have one.
    func tokenOwners(of tokens: Set<AppAccountTokenKey>) throws -> [AppAccountTokenKey: String]
    /// Writes what changed (and the notification received, if any).
    func write(_ changes: LedgerChanges) throws
    /// Moves an app's notification-recovery watermark.
    func setRecoveryWatermark(_ watermark: RecoveryWatermark) throws
}

/// What one write changes: the records to insert or replace.
public struct LedgerChanges: Sendable {
    public var transactions: [LedgerTransaction] = []
    public var subscriptions: [LedgerSubscription] = []
    public var links: [LedgerKey: String] = [:]
    public var tokenOwners: [AppAccountTokenKey: String] = [:]
    /// The notification received, to keep (every notification applied is kept once).
    public var notification: LedgerNotification?

    /// The records of `after` that differ from `before`.
    public init(from before: Ledger, to after: Ledger, notification: LedgerNotification? = nil) {
        transactions = after.transactions.sorted { $0.key < $1.key }.filter { before.transactions[$0.key] != $0.value }.map(\.value)
        subscriptions = after.subscriptions.sorted { $0.key < $1.key }.filter { before.subscriptions[$0.key] != $0.value }.map(\.value)
        links = after.explicitLinks.filter { before.explicitLinks[$0.key] != $0.value }
        tokenOwners = after.tokenOwners.filter { before.tokenOwners[$0.key] != $0.value }
        self.notification = notification
    }

    public var isEmpty: Bool {
        transactions.isEmpty && subscriptions.isEmpty && links.isEmpty && tokenOwners.isEmpty && notification == nil
    }
}

/// The ledger's writes, each one unit of work run inside one backend transaction: what to load, the rules, what to
/// write, and which customers the write may have changed (announced to read caches after the commit).
public enum LedgerUnitOfWork {
    /// Applies a verified notification and everything it carries, once per `notificationUUID`.
    public static func apply(
        _ notification: VerifiedNotification, in transaction: some LedgerWriteTransaction
    ) throws -> (outcome: ApplyOutcome, affected: Set<String>) {
        let uuid = notification.payload.notificationUUID
        if try transaction.notificationExists(uuid) { return (.duplicate, []) }
        var before = Ledger()
        for family in families(touchedBy: notification) { try transaction.loadFamily(family, into: &before) }
        var after = before
        after.apply(notification)
        // Applying never changes a token's owner, only which tokens count: the owners of both sides' tokens.
        let owners = try transaction.tokenOwners(of: before.appAccountTokens.union(after.appAccountTokens))
        before.tokenOwners = owners
        after.tokenOwners = owners
        let record = after.notifications[uuid]!
        try transaction.write(LedgerChanges(from: before, to: after, notification: record))
        return (record.outcome == "applied" ? .applied : .recorded, after.customersAffected(since: before))
    }

    /// Applies a page of notifications fetched from the App Store, each once, and moves the recovery watermark in the
    /// same transaction when given.
    public static func applyRecovered(
        _ notifications: [VerifiedNotification], watermark: RecoveryWatermark?, in transaction: some LedgerWriteTransaction
    ) throws -> (outcomes: [ApplyOutcome], affected: Set<String>) {
        var outcomes: [ApplyOutcome] = []
        var affected = Set<String>()
        for notification in notifications {
            let (outcome, customers) = try apply(notification, in: transaction)
            outcomes.append(outcome)
            affected.formUnion(customers)
        }
        if let watermark { try transaction.setRecoveryWatermark(watermark) }
        return (outcomes, affected)
    }

    /// Applies what the App Store Server API says (reconciliation) under the ledger's rules: each transaction,
    /// renewal info and status replaces the ledger's only when signed later, so older API data never overwrites newer
    /// ledger data. Returns how many records changed.
    public static func applySnapshot(
        _ snapshot: AppStoreSnapshot, in transaction: some LedgerWriteTransaction
    ) throws -> (changed: Int, affected: Set<String>) {
        var before = Ledger()
        for family in snapshot.families.sorted() { try transaction.loadFamily(family, into: &before) }
        var after = before
        after.apply(snapshot)
        let owners = try transaction.tokenOwners(of: before.appAccountTokens.union(after.appAccountTokens))
        before.tokenOwners = owners
        after.tokenOwners = owners
        let changes = LedgerChanges(from: before, to: after)
        guard !changes.isEmpty else { return (0, []) }
        try transaction.write(changes)
        return (changes.transactions.count + changes.subscriptions.count, after.customersAffected(since: before))
    }

    /// Applies a transaction the app submitted and links it to the customer, or refuses it (changing nothing) when
    /// its token or its purchase belongs to another customer.
    public static func submit(
        _ submitted: VerifiedSignedData<TransactionInfo>, customerId: String, in transaction: some LedgerWriteTransaction
    ) throws -> (outcome: SubmissionOutcome, affected: Set<String>) {
        let info = submitted.payload
        guard let environment = info.environment else { return (.linked, []) }
        var ledger = Ledger()
        try transaction.loadFamily(LedgerKey(environment, info.originalTransactionId), into: &ledger)
        var tokens = ledger.appAccountTokens
        if let token = info.appAccountToken { tokens.insert(AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: token)) }
        ledger.tokenOwners = try transaction.tokenOwners(of: tokens)
        if let conflict = ledger.ownershipConflict(linking: info, to: customerId) { return (.refused(conflict), []) }
        let before = ledger
        ledger.apply(info, jws: submitted.jws, source: "app")
        do throws(OwnershipConflict) {
            try ledger.link(info, to: customerId)
        } catch {
            return (.refused(error), [])
        }
        try transaction.write(LedgerChanges(from: before, to: ledger))
        return (.linked, ledger.customersAffected(since: before))
    }

    /// The subscriptions or purchases a notification's transaction and renewal info belong to: their every
    /// transaction, link and subscription record are what a change concerns (the link and the transactions' tokens
    /// name the customers, even when only the renewal info changes).
    static func families(touchedBy notification: VerifiedNotification) -> [LedgerKey] {
        var families = Set<LedgerKey>()
        if let transaction = notification.transaction?.payload, let environment = transaction.environment {
            families.insert(LedgerKey(environment, transaction.originalTransactionId))
        }
        if let renewal = notification.renewalInfo?.payload, let environment = renewal.environment {
            families.insert(LedgerKey(environment, renewal.originalTransactionId))
        }
        return families.sorted()
    }
}
