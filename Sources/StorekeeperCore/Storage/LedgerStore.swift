package import AppStoreModels
package import AppStoreSigning
package import Foundation

/// Where the ledger lives, shaped by the domain (not a SQL facade): SQLite embedded by default, PostgreSQL to scale
/// out. Every method is one atomic unit: it commits completely or not at all.
package protocol LedgerStore: DeliveryStore, Sendable {
    /// Where the store announces, after each commit, the customers a write may have changed (for read caches).
    var changes: LedgerChangeFeed { get }

    /// Applies a verified notification and everything it carries in one transaction, under the ``Ledger`` rules
    /// (once per `notificationUUID`; newest signed version wins).
    func apply(_ notification: VerifiedNotification) async throws(StorageError) -> ApplyOutcome

    /// Keeps what an auditor needs of a refused notification request, keeping at most `keeping` such records (the
    /// oldest go first), so that refused input cannot grow the ledger past `keeping` × ``RefusedNotification/maximumBytes``.
    func recordRefused(_ refusal: RefusedNotification, keeping: Int) async throws(StorageError)

    /// Applies a transaction the app submitted and links it (and its subscription) to the customer, under
    /// ``Ledger/link(_:to:)``'s rule: a submission that would take a token or a purchase from another customer is
    /// refused and changes nothing.
    func submit(
        _ transaction: VerifiedSignedData<TransactionInfo>, customerId: String, policy: RestorePolicy
    ) async throws(StorageError) -> SubmissionOutcome

    /// Whether the customer exists in one app and environment: something of the app is linked to them there, or
    /// they own one of its app account tokens there.
    func customerExists(_ customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Bool

    /// The part of the ledger that concerns one customer of one app: their transactions, subscriptions, links, and
    /// their app account tokens in that app and environment (families found through links may include other apps'
    /// purchases, which the app's readers leave out).
    func ledger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger

    /// What decides the customer's entitlements and their customer view, for fast reads: like
    /// ``ledger(for:bundleId:environment:)`` but with only the latest transaction (by purchase date) of each
    /// auto-renewable subscription, which is all the ``EntitlementEngine`` and the customer view use, and the app
    /// account tokens of the transactions left out (``Ledger/omittedTransactionTokens``), which attribution still
    /// consults; consumables may be counted (``Ledger/consumableTotals``) instead of held; and its records may carry
    /// no raw JWS (``LedgerTransaction/jws`` and ``LedgerSubscription/renewalJWS`` empty), which no answer uses. The
    /// engine's state and next change are the same from either ledger.
    func entitlementLedger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger

    /// Drops the raw signed payloads of notifications received before `date` (their decoded facts, and every
    /// transaction and subscription, stay); returns how many were dropped.
    func pruneRawPayloads(receivedBefore date: Date) async throws(StorageError) -> Int

    /// Whether the ledger holds a notification with this UUID.
    func containsNotification(_ uuid: String) async throws(StorageError) -> Bool

    /// Applies notifications fetched from the App Store (a page of Get Notification History) in one transaction, each
    /// once (a duplicate is a no-op), and, when `watermark` is given, moves that app's recovery watermark in the same
    /// commit: the watermark never stands ahead of what is committed.
    func applyRecovered(_ notifications: [VerifiedNotification], watermark: RecoveryWatermark?) async throws(StorageError) -> [ApplyOutcome]

    /// The recovery watermark of an app in an environment, `nil` before its first complete run.
    func recoveryWatermark(_ app: VerifierKey) async throws(StorageError) -> Date?

    /// Applies what the App Store Server API says (``LedgerUnitOfWork/applySnapshot(_:in:)``) in one transaction;
    /// returns how many records changed.
    func applySnapshot(_ snapshot: AppStoreSnapshot) async throws(StorageError) -> Int

    /// Every transaction, link and subscription record of these families (environment and original transaction ID).
    func ledger(families: [LedgerKey]) async throws(StorageError) -> Ledger

    /// What a support search (``SupportSearch``) finds by one ID in `apps`' environments: every family holding a
    /// transaction with this transaction ID, or this original transaction ID, or carrying this app account token, as
    /// ``ledger(families:)`` reads them, with the owners in `apps` of every app account token their transactions and
    /// renewal infos carry, and of `lookup`'s token, so ``Ledger/customer(of:)`` names each purchase's customer.
    func supportLookup(_ lookup: SupportLookup, in apps: [VerifierKey]) async throws(StorageError) -> Ledger

    /// Appends an action to the support audit log; returns its ID. The log is append-only.
    func recordSupportAction(_ action: SupportAction) async throws(StorageError) -> Int64

    /// Appends `action` unless the log holds an action of its kind on its target for its customer, done (outcome
    /// `done`) at or after `since`: the new action's ID, or the time of the one found. The look and the append are one
    /// transaction, so of two racing (on any instances) one appends and the other finds it: a once-per-customer offer's
    /// signature is claimed so.
    func recordSupportAction(_ action: SupportAction, unlessDoneSince since: Date) async throws(StorageError) -> SupportActionClaim

    /// The audit log's actions on a customer, oldest first.
    func supportActions(customer: CustomerKey) async throws(StorageError) -> [SupportAction]

    /// The audit log's actions on a purchase (an original transaction ID) in an environment, oldest first, whoever
    /// owned it.
    func supportActions(target: String, environment: AppStoreEnvironment) async throws(StorageError) -> [SupportAction]

    /// The signed payload of a stored notification, byte for byte as received (nil when there is no such
    /// notification, or its payload was dropped by ``pruneRawPayloads(receivedBefore:)``).
    func rawPayload(notificationUUID: String) async throws(StorageError) -> String?

    /// Claims, for `holder` until `until`, up to `limit` consumption requests with something to do at `now`: those
    /// not decided yet (``ConsumptionRequestRecord/State/new``), those whose answer is due, and those waiting past their
    /// deadline; a request claimed by another holder whose claim has not lapsed is not claimed.
    func claimConsumptionRequests(now: Date, holder: String, until: Date, limit: Int) async throws(StorageError) -> [ConsumptionRequestRecord]

    /// Writes what `holder` did with a request it claimed, and gives the claim back; false (nothing written) when the
    /// claim is no longer `holder`'s.
    func saveConsumptionRequest(_ record: ConsumptionRequestRecord, holder: String) async throws(StorageError) -> Bool

    /// A person's answer to a request waiting for one (``ConsumptionRequestRecord/State/manual``): it becomes due at
    /// once. Nil when the request is not waiting for a person (answered, decided by the policy, late) or unknown.
    func answerConsumptionRequest(
        _ uuid: String, answer: ConsumptionAnswer, decidedBy: String, at: Date
    ) async throws(StorageError) -> ConsumptionRequestRecord?

    /// One request, by its notification's UUID.
    func consumptionRequest(_ uuid: String) async throws(StorageError) -> ConsumptionRequestRecord?

    /// The requests of a customer, or of apps in some states.
    func consumptionRequests(_ query: ConsumptionRequestQuery) async throws(StorageError) -> [ConsumptionRequestRecord]

    /// Records whether a customer consented to their use of the app being shared with Apple on a refund request.
    func setConsumptionConsent(_ consent: ConsumptionConsent, for customer: CustomerKey) async throws(StorageError)

    /// What a customer last said about sharing (nil: never asked).
    func consumptionConsent(_ customer: CustomerKey) async throws(StorageError) -> ConsumptionConsent?

    /// An app's overview figures (``SupportOverview``) over the window from `since` to `now`.
    func overview(_ app: VerifierKey, since: Date, now: Date) async throws(StorageError) -> SupportOverview

    /// The original transaction IDs of every auto-renewable subscription of an app in an environment, sorted.
    func subscriptionFamilies(bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> [String]

    /// The app account token the server issued to a customer in an app and environment, issued now when there is
    /// none (or when `renew`): a new random UUID, recorded as the customer's in the token owners, so a purchase made
    /// with it is the customer's however it reaches the ledger (a notification alone is enough). The same token on
    /// every call and every instance until renewed (two instances issuing at once agree on one); a renewed token
    /// leaves the earlier ones the customer's.
    func appAccountToken(
        for customerId: String, bundleId: String, environment: AppStoreEnvironment, renew: Bool
    ) async throws(StorageError)
        -> LowercaseUUID

    /// Makes a change of a promotional grant (its ``PromotionalGrantChange/step``: the grant and the customer's events)
    /// and appends `audit` to the audit log (`refused`, with the refusal's code, when it was refused), in one
    /// transaction: the outcome names the audit record.
    func changeGrant(_ change: PromotionalGrantChange, audit: SupportAction) async throws(StorageError) -> PromotionalGrantOutcome

    /// A customer's promotional grants in an app and environment (revoked and expired ones too), oldest first.
    func promotionalGrants(_ customer: CustomerKey) async throws(StorageError) -> [PromotionalGrant]

    /// Erases a customer's identity in one app and environment (``CustomerErasure``), with a `customer.erased` event,
    /// in one transaction; `nil` when the app has no data for the customer there.
    func erase(_ customer: CustomerKey) async throws(StorageError) -> CustomerErasure?

    /// Stops the store's background work (PostgreSQL: its change listener, its checkout watch, its connections). The
    /// store is unusable afterwards. Run by ``LedgerStoreService`` at the end of an application's graceful shutdown.
    func close() async

    /// Throws when the database cannot be reached.
    func checkHealth() async throws(StorageError)

    /// Takes the lease of a scheduled job for `holder` for `duration` when it is free or has lapsed, or renews it when
    /// `holder` has it; returns whether `holder` has it now (``JobLease``).
    func acquireLease(_ job: String, holder: String, duration: Duration) async throws(StorageError) -> Bool

    /// Gives a job's lease back, if `holder` has it.
    func releaseLease(_ job: String, holder: String) async throws(StorageError)

    /// Who holds a job's lease now, or nil when nobody does (or the lease has lapsed).
    func leaseHolder(_ job: String) async throws(StorageError) -> String?

    /// Which database holds the ledger (`sqlite`, `postgresql`), for `/health` and logs.
    var databaseKind: String { get }

    // MARK: The outbox

    /// The rules and clock the outbox decides customers' states with (``OutboxSettings``).
    var outbox: OutboxSettings { get }

    /// Signalled after each of this store's write commits (long polling wakes on it).
    var eventsAppended: EventSignal { get }

    /// The events after `position` in commit order that match `filter`, at most `limit`, oldest first.
    func events(after position: Int64, limit: Int, filter: EventFilter) async throws(StorageError) -> [LedgerEvent]

    /// One event by its ID.
    func event(_ id: EventID) async throws(StorageError) -> LedgerEvent?

    /// The position of the last event committed (0 when none was).
    func lastEventPosition() async throws(StorageError) -> Int64

    /// The secret the ledger keeps under `name`: `new` when it has none yet (it keeps it), else the one it has. Every
    /// instance of a ledger gets the same, and a copy carries it (``LedgerExporting/ledgerSecrets()``).
    func ledgerSecret(_ name: String, orNew new: [UInt8]) async throws(StorageError) -> [UInt8]

    /// Customers whose recorded state changes by itself at or before `date` (an expiry due), at most `limit`.
    func customersDue(at date: Date, limit: Int) async throws(StorageError) -> [CustomerKey]

    /// Re-evaluates customers at the outbox's clock and appends the events of what changed by itself since their
    /// state was recorded (``LedgerUnitOfWork/reevaluating(_:cause:)``), in one transaction; returns how many events.
    func reevaluate(_ customers: [CustomerKey]) async throws(StorageError) -> Int

    /// Drops the events that occurred before `date` that no delivery still waits for and that every endpoint of
    /// `endpoints` (the configured ones) has fanned out (an instance down longer than the retention must not lose its
    /// endpoints' events), never the newest (SQLite gives a new row the largest position plus one: with the newest
    /// gone, a position would be handed out again, behind every cursor); returns how many.
    func pruneEvents(occurredBefore date: Date, keepingUnsentTo endpoints: [String]) async throws(StorageError) -> Int
}

extension LedgerStore {
    /// A submission under the ``RestorePolicy/keep`` policy.
    package func submit(_ transaction: VerifiedSignedData<TransactionInfo>, customerId: String) async throws(StorageError) -> SubmissionOutcome {
        try await submit(transaction, customerId: customerId, policy: .keep)
    }

    /// By default, the whole customer ledger (always correct, never faster).
    package func entitlementLedger(for customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await ledger(for: customerId, bundleId: bundleId, environment: environment)
    }
}
