public import AppStoreModels
public import AppStoreSigning

/// What one step of a unit of work needs read, answered together by the backend inside its write transaction.
public struct LedgerReads: Sendable {
    /// Notifications to claim for this transaction: the answer says which of them the ledger already holds. A
    /// backend with one writer may just look them up; one with several concurrent writers must make the database the
    /// arbiter (PostgreSQL: `INSERT … ON CONFLICT DO NOTHING`), so that two writers cannot both see one as new.
    /// Distinct.
    public var claimNotifications: [String]
    /// Families to load, sorted (a backend with concurrent writers locks them, in this order, before reading).
    public var families: [LedgerKey] = []
    /// App account tokens whose owners to read (a backend with concurrent writers locks them too).
    public var tokens: Set<AppAccountTokenKey> = []

    /// A backend answers in this order: it locks `families` and `tokens` (in one sorted order, so that two steps can
    /// never hold each other's locks), then claims the notifications, and only when one of them is new (or none was
    /// asked for) loads the families and reads the tokens' owners. Claiming after locking matters with concurrent
    /// writers: a writer that has claimed a notification holds its families' locks, so no other writer can wait for
    /// the claim while holding a lock that writer needs.
    public init(claimNotifications: [String] = [], families: [LedgerKey] = [], tokens: Set<AppAccountTokenKey> = []) {
        self.claimNotifications = claimNotifications
        self.families = families.sorted()
        self.tokens = tokens
    }
}

/// The answers to ``LedgerReads``.
public struct LedgerReadResults: Sendable {
    /// The notifications to claim that were already in the ledger (when all were, nothing else was read).
    public var existingNotifications: Set<String> = []
    /// Every transaction, link and subscription record of the families asked for.
    public var ledger = Ledger()
    /// The owners of the tokens asked for that have one.
    public var tokenOwners: [AppAccountTokenKey: String] = [:]

    public init() {}
}

/// One unit of work on the ledger as the steps a backend runs, the pure core deciding and the backend doing (as
/// postgres-nio's `ConnectionStateMachine` returns actions that its channel handler executes): read, then write,
/// then the result. The rules are all in the steps; a backend only answers reads and writes rows, synchronously
/// (SQLite, inside GRDB's write closure) or asynchronously (PostgreSQL), with ``run(in:)``.
public indirect enum LedgerStep<Result> {
    /// Read these, then go on with what the continuation returns.
    case read(LedgerReads, (LedgerReadResults) -> LedgerStep<Result>)
    /// Write these changes (and the notification received, if any), then go on.
    case write(LedgerChanges, then: LedgerStep<Result>)
    /// Move an app's notification-recovery watermark, then go on.
    case setWatermark(RecoveryWatermark, then: LedgerStep<Result>)
    /// Done.
    case done(Result)

    /// This unit of work followed by the one `next` makes of its result.
    public func flatMap<Next>(_ next: @escaping (Result) -> LedgerStep<Next>) -> LedgerStep<Next> {
        switch self {
        case .read(let reads, let resume): .read(reads) { resume($0).flatMap(next) }
        case .write(let changes, let rest): .write(changes, then: rest.flatMap(next))
        case .setWatermark(let watermark, let rest): .setWatermark(watermark, then: rest.flatMap(next))
        case .done(let result): next(result)
        }
    }

    /// Runs the steps in a backend's synchronous write transaction.
    public func run(in transaction: some LedgerWriteTransaction) throws -> Result {
        var step = self
        while true {
            switch step {
            case .read(let reads, let resume): step = resume(try transaction.read(reads))
            case .write(let changes, let rest): try transaction.write(changes); step = rest
            case .setWatermark(let watermark, let rest): try transaction.setRecoveryWatermark(watermark); step = rest
            case .done(let result): return result
            }
        }
    }

    /// Runs the steps in a backend's asynchronous write transaction.
    public func run(in transaction: some AsyncLedgerWriteTransaction) async throws -> Result {
        var step = self
        while true {
            switch step {
            case .read(let reads, let resume): step = resume(try await transaction.read(reads))
            case .write(let changes, let rest): try await transaction.write(changes); step = rest
            case .setWatermark(let watermark, let rest): try await transaction.setRecoveryWatermark(watermark); step = rest
            case .done(let result): return result
            }
        }
    }
}

/// The row operations of a backend whose write transaction is synchronous (SQLite).
public protocol LedgerWriteTransaction {
    /// Answers one step's reads (by default through the three look-ups below).
    func read(_ reads: LedgerReads) throws -> LedgerReadResults
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

extension LedgerWriteTransaction {
    public func read(_ reads: LedgerReads) throws -> LedgerReadResults {
        var results = LedgerReadResults()
        for uuid in reads.claimNotifications {
            if try notificationExists(uuid) { results.existingNotifications.insert(uuid) }
        }
        if !reads.claimNotifications.isEmpty, results.existingNotifications.count == reads.claimNotifications.count { return results }
        for family in reads.families { try loadFamily(family, into: &results.ledger) }
        if !reads.tokens.isEmpty { results.tokenOwners = try tokenOwners(of: reads.tokens) }
        return results
    }
}

/// The row operations of a backend whose write transaction is asynchronous (PostgreSQL).
public protocol AsyncLedgerWriteTransaction {
    /// Answers one step's reads, claiming the notifications and locking the families and tokens asked for.
    func read(_ reads: LedgerReads) async throws -> LedgerReadResults
    /// Writes what changed (and the notification received, if any).
    func write(_ changes: LedgerChanges) async throws
    /// Moves an app's notification-recovery watermark.
    func setRecoveryWatermark(_ watermark: RecoveryWatermark) async throws
}

/// What one write changes: the records to insert or replace.
public struct LedgerChanges: Sendable {
    public var transactions: [LedgerTransaction] = []
    public var subscriptions: [LedgerSubscription] = []
    public var links: [LedgerKey: String] = [:]
    public var tokenOwners: [AppAccountTokenKey: String] = [:]
    /// The notifications received, to keep (every notification applied is kept once).
    public var notifications: [LedgerNotification] = []

    /// The records of `after` that differ from `before`.
    public init(from before: Ledger, to after: Ledger, notifications: [LedgerNotification] = []) {
        transactions = after.transactions.sorted { $0.key < $1.key }.filter { before.transactions[$0.key] != $0.value }.map(\.value)
        subscriptions = after.subscriptions.sorted { $0.key < $1.key }.filter { before.subscriptions[$0.key] != $0.value }.map(\.value)
        links = after.explicitLinks.filter { before.explicitLinks[$0.key] != $0.value }
        tokenOwners = after.tokenOwners.filter { before.tokenOwners[$0.key] != $0.value }
        self.notifications = notifications
    }

    public var isEmpty: Bool {
        transactions.isEmpty && subscriptions.isEmpty && links.isEmpty && tokenOwners.isEmpty && notifications.isEmpty
    }
}

/// The ledger's writes, each one unit of work run inside one backend transaction: what to load, the rules, what to
/// write, and which customers the write may have changed (announced to read caches after the commit). Each is given
/// as ``LedgerStep``s (`applying`, `submitting`, …) and, for convenience, run in a transaction (`apply(_:in:)`, …).
public enum LedgerUnitOfWork {
    /// Applies a verified notification and everything it carries, once per `notificationUUID`.
    public static func applying(_ notification: VerifiedNotification) -> LedgerStep<(outcome: ApplyOutcome, affected: Set<String>)> {
        applyingTogether([notification]).flatMap { result in .done((result.outcomes[0], result.affected)) }
    }

    /// Applies notifications together, in one transaction, each once per `notificationUUID` (a UUID repeated in the
    /// list is a duplicate after its first), in their order: the same ledger as applying them one after another. One
    /// read asks for the locks of all their families, the claims of all of them, their families and the owners of the
    /// tokens their transactions carry (often all a write needs); one write keeps them. A backend with concurrent
    /// writers uses this to apply the notifications that arrive together as one commit (and a page of recovered
    /// notifications is applied so).
    public static func applyingTogether(_ notifications: [VerifiedNotification]) -> LedgerStep<(outcomes: [ApplyOutcome], affected: Set<String>)> {
        var distinct: [VerifiedNotification] = []
        var seen = Set<String>()
        for notification in notifications where seen.insert(notification.payload.notificationUUID).inserted { distinct.append(notification) }
        guard !distinct.isEmpty else { return .done(([], [])) }
        let tokens = Set(distinct.compactMap { $0.transaction.flatMap { LedgerTransaction.tokenKey(of: $0.payload) } })
        let reads = LedgerReads(
            claimNotifications: distinct.map(\.payload.notificationUUID), families: Array(Set(distinct.flatMap(families(touchedBy:)))), tokens: tokens
        )
        return .read(reads) { loaded in
            let new = distinct.filter { !loaded.existingNotifications.contains($0.payload.notificationUUID) }
            guard !new.isEmpty else { return .done((notifications.map { _ in .duplicate }, [])) }
            return applyingToLoaded(loaded, tokensRead: reads.tokens, { ledger in for notification in new { ledger.apply(notification) } }) { before, after in
                let records = new.map { after.notifications[$0.payload.notificationUUID]! }
                var outcomes: [String: ApplyOutcome] = [:]
                for record in records { outcomes[record.notificationUUID] = record.outcome == "applied" ? .applied : .recorded }
                // Each UUID's outcome goes to its first occurrence; a repeat is a duplicate.
                let answers = notifications.map { notification in outcomes.removeValue(forKey: notification.payload.notificationUUID) ?? .duplicate }
                return .write(LedgerChanges(from: before, to: after, notifications: records), then: .done((answers, after.customersAffected(since: before))))
            }
        }
    }

    /// Applies a page of notifications fetched from the App Store together (``applyingTogether(_:)``: every family of
    /// the page locked at once, so that two instances applying overlapping pages in opposite orders wait for each
    /// other instead of deadlocking), and moves the recovery watermark in the same transaction when given.
    public static func applyingRecovered(
        _ notifications: [VerifiedNotification], watermark: RecoveryWatermark?
    ) -> LedgerStep<(outcomes: [ApplyOutcome], affected: Set<String>)> {
        let step = applyingTogether(notifications)
        guard let watermark else { return step }
        return step.flatMap { result in .setWatermark(watermark, then: .done(result)) }
    }

    /// Applies what the App Store Server API says (reconciliation) under the ledger's rules: each transaction,
    /// renewal info and status replaces the ledger's only when signed later, so older API data never overwrites newer
    /// ledger data. Returns how many records changed.
    public static func applyingSnapshot(_ snapshot: AppStoreSnapshot) -> LedgerStep<(changed: Int, affected: Set<String>)> {
        applyingToFamilies(Array(snapshot.families), { $0.apply(snapshot) }) { before, after in
            let changes = LedgerChanges(from: before, to: after)
            guard !changes.isEmpty else { return .done((0, [])) }
            return .write(
                changes, then: .done((changes.transactions.count + changes.subscriptions.count, after.customersAffected(since: before)))
            )
        }
    }

    /// Applies a transaction the app submitted and links it to the customer, or refuses it (changing nothing) when
    /// its token or its purchase belongs to another customer.
    public static func submitting(
        _ submitted: VerifiedSignedData<TransactionInfo>, customerId: String
    ) -> LedgerStep<(outcome: SubmissionOutcome, affected: Set<String>)> {
        let info = submitted.payload
        guard let environment = info.environment else { return .done((.linked, [])) }
        let submittedToken = LedgerTransaction.tokenKey(of: info)
        let first = LedgerReads(families: [LedgerKey(environment, info.originalTransactionId)], tokens: submittedToken.map { [$0] } ?? [])
        return .read(first) { loaded in
            var ledger = loaded.ledger
            var tokens = ledger.appAccountTokens
            if let submittedToken { tokens.insert(submittedToken) }
            return withOwners(of: tokens, read: first.tokens, from: loaded) { owners in
                ledger.tokenOwners = owners
                if let conflict = ledger.ownershipConflict(linking: info, to: customerId) { return .done((.refused(conflict), [])) }
                let before = ledger
                ledger.apply(info, jws: submitted.jws, source: "app")
                do throws(OwnershipConflict) {
                    try ledger.link(info, to: customerId)
                } catch {
                    return .done((.refused(error), []))
                }
                return .write(LedgerChanges(from: before, to: ledger), then: .done((.linked, ledger.customersAffected(since: before))))
            }
        }
    }

    /// Loads `families`, applies `change` to them, and reads the owners of both sides' tokens (applying never
    /// changes a token's owner, only which tokens count); `then` gets the ledger before and after, owners known.
    static func applyingToFamilies<Result>(
        _ families: [LedgerKey], _ change: @escaping (inout Ledger) -> Void,
        then: @escaping (_ before: Ledger, _ after: Ledger) -> LedgerStep<Result>
    ) -> LedgerStep<Result> {
        .read(LedgerReads(families: families)) { loaded in applyingToLoaded(loaded, tokensRead: [], change, then: then) }
    }

    /// ``applyingToFamilies(_:_:then:)`` once the families are loaded, with the owners of `tokensRead` read too: only
    /// the other tokens' owners are read.
    static func applyingToLoaded<Result>(
        _ loaded: LedgerReadResults, tokensRead: Set<AppAccountTokenKey>, _ change: @escaping (inout Ledger) -> Void,
        then: @escaping (_ before: Ledger, _ after: Ledger) -> LedgerStep<Result>
    ) -> LedgerStep<Result> {
        var before = loaded.ledger
        var after = before
        change(&after)
        return withOwners(of: before.appAccountTokens.union(after.appAccountTokens), read: tokensRead, from: loaded) { owners in
            before.tokenOwners = owners
            after.tokenOwners = owners
            return then(before, after)
        }
    }

    /// The owners of `needed` tokens, then `then`: those of `read` were read with `loaded`, the others are read now
    /// (no step at all when none is missing).
    static func withOwners<Result>(
        of needed: Set<AppAccountTokenKey>, read: Set<AppAccountTokenKey>, from loaded: LedgerReadResults,
        then: @escaping ([AppAccountTokenKey: String]) -> LedgerStep<Result>
    ) -> LedgerStep<Result> {
        let known = loaded.tokenOwners.filter { needed.contains($0.key) }
        let missing = needed.subtracting(read)
        guard !missing.isEmpty else { return then(known) }
        return .read(LedgerReads(tokens: missing)) { owners in then(known.merging(owners.tokenOwners) { $1 }) }
    }

    // MARK: Run in a synchronous transaction

    public static func apply(
        _ notification: VerifiedNotification, in transaction: some LedgerWriteTransaction
    ) throws -> (outcome: ApplyOutcome, affected: Set<String>) {
        try applying(notification).run(in: transaction)
    }

    public static func applyRecovered(
        _ notifications: [VerifiedNotification], watermark: RecoveryWatermark?, in transaction: some LedgerWriteTransaction
    ) throws -> (outcomes: [ApplyOutcome], affected: Set<String>) {
        try applyingRecovered(notifications, watermark: watermark).run(in: transaction)
    }

    public static func applySnapshot(
        _ snapshot: AppStoreSnapshot, in transaction: some LedgerWriteTransaction
    ) throws -> (changed: Int, affected: Set<String>) {
        try applyingSnapshot(snapshot).run(in: transaction)
    }

    public static func submit(
        _ submitted: VerifiedSignedData<TransactionInfo>, customerId: String, in transaction: some LedgerWriteTransaction
    ) throws -> (outcome: SubmissionOutcome, affected: Set<String>) {
        try submitting(submitted, customerId: customerId).run(in: transaction)
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
