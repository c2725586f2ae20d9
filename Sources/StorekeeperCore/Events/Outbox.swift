import AppStoreModels
package import Foundation
import Synchronization

/// What the ledger's outbox needs to decide a customer's state inside a write: the entitlement rules and the clock
/// (the server's, so tests and the demo can move it). A store holds one; the server sets it from its configuration
/// before it serves. Until then, the default rules and the machine's clock.
package final class OutboxSettings: Sendable {
    /// The rules and the clock. The clock is a field of a struct, never a bare function value in the mutex's generic
    /// storage: read through `withLock`'s `inout`, a function stored there is written back wrapped in one more
    /// reabstraction thunk on every read, so each write's clock call grew longer until the stack overflowed.
    private struct Rules: Sendable {
        var entitlements = EntitlementConfiguration()
        var clock: @Sendable () -> Date = { Date() }
    }

    private let state = Mutex(Rules())

    package init() {}

    package func configure(entitlements: EntitlementConfiguration, clock: @escaping @Sendable () -> Date) {
        state.withLock { $0 = Rules(entitlements: entitlements, clock: clock) }
    }

    package var entitlements: EntitlementConfiguration { state.withLock { $0.entitlements } }
    package var now: Date { state.withLock { $0.clock }() }

    private let enabled = Atomic<Bool>(true)

    /// Whether writes append events. Off only for `storekeeper bench events`, which measures what the outbox costs
    /// ingestion: a ledger whose outbox was off has states and sequences that miss those writes.
    package var isEnabled: Bool {
        get { enabled.load(ordering: .relaxed) }
        set { enabled.store(newValue, ordering: .relaxed) }
    }
}

/// What the outbox reads in a write's transaction: customers' ledgers and recorded states.
package struct OutboxReads: Sendable {
    package var customers: [CustomerKey]
    /// Families the unit of work holds already (its snapshots): a backend need not load them for the customers.
    package var known: Set<LedgerKey>

    package init(customers: [CustomerKey], known: Set<LedgerKey> = []) {
        self.customers = customers
        self.known = known
    }
}

/// The answers to a unit of work's read of customers for the outbox.
package struct OutboxReadResults: Sendable {
    /// Each customer's ledger as the transaction sees it (after the write's changes), every app's purchases of theirs
    /// (the families of ``OutboxReads/known`` may be left out).
    package var ledgers: [CustomerKey: Ledger] = [:]
    /// What the outbox last recorded of each (missing: nothing yet).
    package var stored: [CustomerKey: CustomerStateRecord] = [:]
    /// The state JSON of each recorded customer's last event (``CustomerStateRecord/sequence``), where it is still
    /// kept (missing: pruned, or no event yet).
    package var lastEventStates: [CustomerKey: String] = [:]
    package var configuration = EntitlementConfiguration()
    package var now = Date()
    /// False when the store's outbox is off (``OutboxSettings/isEnabled``): nothing was read, nothing is appended.
    package var enabled = true

    package init() {}
}

/// What the outbox appends in a write's transaction.
package struct OutboxAppend: Sendable {
    package var drafts: [EventDraft] = []
    /// The customers' new recorded states.
    package var records: [CustomerStateRecord] = []

    package init() {}

    package var isEmpty: Bool { drafts.isEmpty && records.isEmpty }
}

extension LedgerUnitOfWork {
    /// The outbox's part of a write, after its changes are written: reads the customers the change may concern (each
    /// affected customer in each app and environment the change touched), decides their events
    /// (``EventDerivation``) and appends them with their new states, in the same transaction.
    ///
    /// `snapshots` are the ledger of the write's families before its first change and after each change, `causes`
    /// what made each change; `families` the families they hold (the rest of each customer's ledger is read);
    /// `changed` the families each change touched, when the caller knows (a batch of notifications: each touches its
    /// own), else each may have touched them all.
    static func emittingEvents<Result>(
        snapshots: [Ledger], causes: [EventCause], families: Set<LedgerKey>, changed: [Set<LedgerKey>]? = nil, affected: Set<String>? = nil,
        then result: Result
    ) -> LedgerStep<Result> {
        guard let first = snapshots.first, let last = snapshots.last else { return .done(result) }
        precondition(snapshots.count == causes.count + 1, "a snapshot before the first change and after each")
        let changed = changed ?? Array(repeating: families, count: causes.count)
        let transactionsOf = transactionsByFamily(first, last, families: families)
        let (changesOf, familiesOf) = ownership(
            snapshots: snapshots, families: families, transactionsOf: transactionsOf, changed: changed, affected: affected)
        let customers = Set(changesOf.keys)
        guard !customers.isEmpty else { return .done(result) }
        var apps = Set<AppScope>()
        for snapshot in [first, last] {
            for transaction in snapshot.transactions.values {
                guard let environment = transaction.info.environment,
                    families.contains(LedgerKey(environment, transaction.info.originalTransactionId))
                else { continue }
                apps.insert(AppScope(bundleId: transaction.info.bundleId, environment: environment))
            }
            for (key, subscription) in snapshot.subscriptions where families.contains(key) && !subscription.bundleId.isEmpty {
                apps.insert(AppScope(bundleId: subscription.bundleId, environment: key.environment))
            }
        }
        let keys = customers.flatMap { customer in
            apps.map { CustomerKey(bundleId: $0.bundleId, environment: $0.environment, customerId: customer) }
        }.sorted()
        guard !keys.isEmpty else { return .done(result) }
        return .readCustomers(OutboxReads(customers: keys, known: families)) { read in
            guard read.enabled else { return .done(result) }
            var append = OutboxAppend()
            // Notifications and submissions add token owners, never remove one: the first and last snapshots hold them all.
            let tokens = Set(first.tokenOwners.keys).union(last.tokenOwners.keys)
            for key in keys {
                let current = read.ledgers[key] ?? Ledger()
                // Only the changes that concern the customer: between them, their ledger stays as it was (a batch of
                // notifications about many customers costs each customer their own changes, not the whole batch's);
                // and only the write's families that are theirs in some snapshot.
                let mine = changesOf[key.customerId] ?? []
                guard let firstChange = mine.first else { continue }
                let theirs = familiesOf[key.customerId] ?? []
                let ledgers = ([firstChange] + mine.map { $0 + 1 }).map {
                    replacing(
                        theirs, transactionsOf: transactionsOf, tokens: tokens, of: current, with: snapshots[$0], customerId: key.customerId,
                        bundleId: key.bundleId)
                }
                let (drafts, record) = EventDerivation.derive(
                    .init(
                        customer: key, stored: read.stored[key], ledgers: ledgers, causes: mine.map { causes[$0] },
                        lastEventState: read.lastEventStates[key]),
                    configuration: read.configuration, at: read.now)
                append.drafts += drafts
                if let record, record != read.stored[key] { append.records.append(record) }
            }
            guard !append.isEmpty else { return .done(result) }
            return .appendEvents(append, then: .done(result))
        }
    }

    /// Which changes may concern each customer, and which of the write's families are theirs (linked, or carrying a
    /// token of theirs) in at least one snapshot. A single change concerns `affected` (or the customers
    /// ``Ledger/customersAffected(since:)`` finds); a change of a batch, the owners of the families it touched, before
    /// and after it (its notification's families: a family's owners change only in a snapshot after a change that
    /// touched it), so a batch costs each change its own families, not a comparison of two whole batches.
    static func ownership(
        snapshots: [Ledger], families: Set<LedgerKey>, transactionsOf: [LedgerKey: Set<LedgerKey>], changed: [Set<LedgerKey>],
        affected: Set<String>?
    ) -> (changesOf: [String: [Int]], familiesOf: [String: Set<LedgerKey>]) {
        guard let first = snapshots.first, let last = snapshots.last else { return ([:], [:]) }
        var changesOf: [String: [Int]] = [:]
        var familiesOf: [String: Set<LedgerKey>] = [:]
        var latest: [LedgerKey: Set<String>] = [:]
        for family in families {
            let owners = owners(of: family, in: first, transactionsOf: transactionsOf)
            latest[family] = owners
            for owner in owners { familiesOf[owner, default: []].insert(family) }
        }
        for (index, touched) in changed.enumerated() {
            var concerned = Set<String>()
            for family in touched where families.contains(family) {
                let owners = owners(of: family, in: snapshots[index + 1], transactionsOf: transactionsOf)
                concerned.formUnion(latest[family] ?? [])
                concerned.formUnion(owners)
                latest[family] = owners
                for owner in owners { familiesOf[owner, default: []].insert(family) }
            }
            if snapshots.count == 2 {
                concerned = affected?.isEmpty == false ? affected ?? [] : last.customersAffected(since: first)
            }
            for customer in concerned { changesOf[customer, default: []].append(index) }
        }
        return (changesOf, familiesOf)
    }

    /// The transactions of each of `families` (a write adds transactions, never removes one: its first and last
    /// snapshots hold them all).
    static func transactionsByFamily(_ first: Ledger, _ last: Ledger, families: Set<LedgerKey>) -> [LedgerKey: Set<LedgerKey>] {
        var transactionsOf: [LedgerKey: Set<LedgerKey>] = [:]
        for ledger in [first, last] {
            for (key, transaction) in ledger.transactions {
                guard let environment = transaction.info.environment else { continue }
                let family = LedgerKey(environment, transaction.info.originalTransactionId)
                if families.contains(family) { transactionsOf[family, default: []].insert(key) }
            }
        }
        return transactionsOf
    }

    /// Whoever a family may be the purchase of in `ledger`: its linked customer, its transactions' tokens' owners
    /// (for those without one, the family's owner as ``Ledger/customer(of:)`` finds it, the same for all of them) and
    /// its renewal info's token's owner. A superset of who ``Ledger/customer(of:)`` names for any of its transactions.
    static func owners(of family: LedgerKey, in ledger: Ledger, transactionsOf: [LedgerKey: Set<LedgerKey>]) -> Set<String> {
        var owners = Set<String>()
        if let linked = ledger.explicitLinks[family] { owners.insert(linked) }
        var familyOwnerLooked = false
        for key in transactionsOf[family] ?? [] {
            guard let transaction = ledger.transactions[key] else { continue }
            let info = transaction.info
            if let token = info.appAccountToken,
                let owner = ledger.tokenOwners[AppAccountTokenKey(bundleId: info.bundleId, environment: family.environment, token: token)]
            {
                owners.insert(owner)
            } else if !familyOwnerLooked {
                familyOwnerLooked = true
                if let owner = ledger.customer(of: transaction) { owners.insert(owner) }
            }
        }
        if let subscription = ledger.subscriptions[family], let token = subscription.renewalInfo?.appAccountToken,
            let owner = ledger.tokenOwners[AppAccountTokenKey(bundleId: subscription.bundleId, environment: family.environment, token: token)]
        {
            owners.insert(owner)
        }
        return owners
    }

    /// Re-evaluates customers whose recorded state may have changed by itself (an expiry due): their events, caused by
    /// time, or by `cause` (``EventDerivation/Input/unannouncedCause``). `keys` sorted.
    package static func reevaluating(_ keys: [CustomerKey], cause: EventCause = EventCause(.expiry)) -> LedgerStep<Int> {
        guard !keys.isEmpty else { return .done(0) }
        return .readCustomers(OutboxReads(customers: keys)) { read in
            guard read.enabled else { return .done(0) }
            var append = OutboxAppend()
            for key in keys {
                guard let stored = read.stored[key] else { continue }
                let ledger = onlyApp(read.ledgers[key] ?? Ledger(), bundleId: key.bundleId)
                let (drafts, record) = EventDerivation.derive(
                    .init(
                        customer: key, stored: stored, ledgers: [ledger], causes: [], lastEventState: read.lastEventStates[key],
                        unannouncedCause: cause),
                    configuration: read.configuration, at: read.now)
                append.drafts += drafts
                if let record, record != stored { append.records.append(record) }
            }
            guard !append.isEmpty else { return .done(0) }
            return .appendEvents(append, then: .done(append.drafts.count))
        }
    }

    /// After a customer's erasure (their links and tokens deleted in the same transaction): whoever owns one of
    /// `families` now, in app `bundleId`, is re-evaluated. A purchase the `transfer` restore policy had moved to the
    /// erased customer returns to the owner of its token, whose state changed with no write of theirs: one
    /// `customer.updated`, caused by the erasure. The customers looked at, for the read caches.
    package static func reevaluatingOwners(
        of families: [LedgerKey], bundleId: String, erased: String
    ) -> LedgerStep<(events: Int, customers: Set<String>)> {
        guard !families.isEmpty else { return .done((0, [])) }
        let reads = LedgerReads(families: families)
        return .read(reads) { loaded in
            var ledger = loaded.ledger
            return LedgerUnitOfWork.withOwners(of: ledger.appAccountTokens, read: reads.tokens, from: loaded) { owners in
                ledger.tokenOwners = owners
                var keys = Set<CustomerKey>()
                for transaction in ledger.transactions.values where transaction.info.bundleId == bundleId {
                    guard let environment = transaction.info.environment, let owner = ledger.customer(of: transaction), owner != erased else {
                        continue
                    }
                    keys.insert(CustomerKey(bundleId: bundleId, environment: environment, customerId: owner))
                }
                return reevaluating(keys.sorted(), cause: EventCause(.api, id: "erase")).flatMap { .done(($0, Set(keys.map(\.customerId)))) }
            }
        }
    }

    /// A customer's ledger with the write's families (and the owners of `tokens`) as `snapshot` holds them, one app's
    /// transactions only. `transactionsOf`: the transactions of each family (``transactionsByFamily(_:_:families:)``),
    /// so that a customer's ledger costs their own transactions, not the whole batch's.
    static func replacing(
        _ families: Set<LedgerKey>, transactionsOf: [LedgerKey: Set<LedgerKey>], tokens: Set<AppAccountTokenKey>, of current: Ledger,
        with snapshot: Ledger, customerId: String, bundleId: String
    ) -> Ledger {
        var ledger = current
        func kept(_ transaction: LedgerTransaction) -> Bool {
            guard let environment = transaction.info.environment else { return false }
            return !families.contains(LedgerKey(environment, transaction.info.originalTransactionId))
        }
        if !ledger.transactions.values.allSatisfy(kept) { ledger.transactions = ledger.transactions.filter { kept($0.value) } }
        // Only the write's families that are the customer's in this snapshot: a customer's answer is made of their
        // own purchases (the others of a batch are other customers').
        var owned: [LedgerKey: Bool] = [:]
        for family in families {
            for key in transactionsOf[family] ?? [] {
                guard let transaction = snapshot.transactions[key] else { continue }
                if owned[family] == nil { owned[family] = snapshot.customer(of: transaction) == customerId }
                if owned[family] == true { ledger.transactions[key] = transaction }
            }
        }
        for family in families {
            let mine = owned[family] ?? (snapshot.explicitLinks[family] == customerId)
            ledger.subscriptions[family] = mine ? snapshot.subscriptions[family] : nil
            ledger.explicitLinks[family] = mine ? snapshot.explicitLinks[family] : nil
            ledger.omittedTransactionTokens[family] = nil
        }
        if ledger.tokenOwners.keys.allSatisfy({ snapshot.tokenOwners[$0] != nil }) {
            // What the loop below would make, shared instead of rebuilt.
            ledger.tokenOwners = snapshot.tokenOwners
        } else {
            for token in tokens { ledger.tokenOwners[token] = snapshot.tokenOwners[token] }
        }
        return onlyApp(ledger, bundleId: bundleId)
    }

    static func onlyApp(_ ledger: Ledger, bundleId: String) -> Ledger {
        var ledger = ledger
        // Filtered only when another app's are there: a filter builds a new dictionary even when it keeps everything.
        if ledger.transactions.values.contains(where: { $0.info.bundleId != bundleId }) {
            ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == bundleId }
        }
        if ledger.consumableTotals.keys.contains(where: { $0.bundleId != bundleId }) {
            ledger.consumableTotals = ledger.consumableTotals.filter { $0.key.bundleId == bundleId }
        }
        if ledger.grants.values.contains(where: { $0.bundleId != bundleId }) {
            ledger.grants = ledger.grants.filter { $0.value.bundleId == bundleId }
        }
        return ledger
    }
}

/// An app in an environment.
struct AppScope: Hashable {
    var bundleId: String
    var environment: AppStoreEnvironment
}
