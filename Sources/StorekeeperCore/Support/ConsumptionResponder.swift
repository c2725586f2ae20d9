import AppStoreModels
package import AppStoreServerAPI
package import AppStoreSigning
package import Foundation
package import Logging

/// Answers `CONSUMPTION_REQUEST` notifications by each app's ``ConsumptionPolicy``: one pass claims the requests with
/// something to do (through the ledger: two instances never work on one at once), decides the new ones from the
/// stored, re-verified notification and what the ledger knows of the customer, sends the due answers with Send
/// Consumption Information (v2), reschedules a failed call with backoff until Apple's 12 hours are up, and writes every
/// outcome to the support audit log.
///
/// An answer is sent once: it is marked sent in the claim that sent it. (A process killed between Apple's 202 and that
/// write sends it again when the claim lapses; Apple keeps the latest information it is given.)
package struct ConsumptionResponder: Sendable {
    package var store: any LedgerStore
    /// Each app's and environment's verifier: stored notifications are verified again before they decide anything.
    package var verifiers: [VerifierKey: SignedDataVerifier]
    /// Each app's and environment's App Store Server API (none: nothing can be sent there).
    package var clients: [VerifierKey: AppStoreServerAPIClient]
    /// By bundle ID; an app without one waits for a person (``ConsumptionPolicy/Mode/manual``).
    package var policies: [String: ConsumptionPolicy]
    /// This instance (claims are made in its name).
    package var holder: String
    package var now: @Sendable () -> Date
    /// The longest one call to the App Store is waited for.
    package var budget: Duration
    package var logger: Logger
    /// Told each request's final outcome (`sent`, `late`, `failed`, `not-consented`, `no-answer`) and `manual` when a
    /// request starts waiting for a person; for metrics.
    package var outcome: @Sendable (_ bundleId: String, _ outcome: String) -> Void

    package init(
        store: any LedgerStore, verifiers: [VerifierKey: SignedDataVerifier], clients: [VerifierKey: AppStoreServerAPIClient],
        policies: [String: ConsumptionPolicy], holder: String, now: @escaping @Sendable () -> Date, budget: Duration = .seconds(30),
        logger: Logger, outcome: @escaping @Sendable (String, String) -> Void = { _, _ in }
    ) {
        self.store = store
        self.verifiers = verifiers
        self.clients = clients
        self.policies = policies
        self.holder = holder
        self.now = now
        self.budget = budget
        self.logger = logger
        self.outcome = outcome
    }

    /// How long a claim lasts: longer than one call to the App Store may take.
    var claimDuration: TimeInterval { Double(budget.components.seconds) * 2 + 30 }

    /// One pass: every request with something to do now; returns how many were handled.
    @discardableResult
    package func pass() async -> Int {
        var handled = 0
        do {
            while !Task.isCancelled {
                let at = now()
                let claimed = try await store.claimConsumptionRequests(
                    now: at, holder: holder, until: at.addingTimeInterval(claimDuration), limit: 20)
                for record in claimed {
                    let next = await handle(record)
                    if try await store.saveConsumptionRequest(next, holder: holder) {
                        if next.state != record.state { try await reached(next) }
                    } else {
                        logger.warning(
                            "a consumption request's claim lapsed before its outcome was saved; it is handled again",
                            metadata: ["notification.uuid": .string(record.notificationUUID)])
                    }
                    handled += 1
                }
                if claimed.count < 20 { break }
            }
        } catch {
            logger.error("consumption request pass failed; it runs again shortly", metadata: ["error": .string(error.message)])
        }
        return handled
    }

    /// What happens to one claimed request now.
    func handle(_ claimed: ConsumptionRequestRecord) async -> ConsumptionRequestRecord {
        var record = claimed
        let at = now()
        if record.state == .new {
            do {
                record = try await decide(record, at: at)
            } catch let error as Undecidable {
                record.state = .failed
                record.lastError = error.message
            } catch let error as VerificationError {
                record.state = .failed
                record.lastError = "the stored notification does not verify: \(error.message)"
            } catch {
                // The ledger could not be read: decided on the next pass.
                logger.warning("a consumption request could not be decided yet", metadata: ["error": .string("\(error)")])
                return claimed
            }
        }
        if !record.state.isFinal, let deadline = record.deadline, at >= deadline {
            record.state = .late
            record.lastError = record.lastError ?? "Apple's 12 hours passed before an answer was sent"
        }
        if record.state == .pending { record = await send(record, at: at) }
        if record.state.isFinal { record.finishedAt = record.finishedAt ?? at }
        return record
    }

    /// Why a request could not be decided, in words.
    struct Undecidable: Error {
        var message: String
    }

    /// Decides a new request from its stored notification (verified again) and the customer's ledger.
    func decide(_ claimed: ConsumptionRequestRecord, at: Date) async throws -> ConsumptionRequestRecord {
        var record = claimed
        guard let jws = try await store.rawPayload(notificationUUID: record.notificationUUID) else {
            throw Undecidable(message: "the notification's signed payload is no longer kept (raw payload retention): it cannot be decided")
        }
        // Routed by its unverified payload to the verifier that then checks everything.
        let routed = try UnverifiedJWS.unsafeDecode(jws, as: NotificationPayload.self)
        let bundleId = routed.payload.data?.bundleId ?? ""
        let environment = routed.payload.data?.environment ?? .production
        let app = VerifierKey(bundleId: bundleId, environment: environment)
        guard let verifier = verifiers[app] else {
            throw Undecidable(
                message:
                    "the notification is for \(UntrustedText.quoted(bundleId, limit: 160)) (\(environment.rawValue)), which is no longer configured")
        }
        let verified = try await verifier.verifyNotification(routed)
        guard let transaction = verified.transaction?.payload else {
            throw Undecidable(message: "the notification carries no signed transaction")
        }
        record.bundleId = bundleId
        record.environment = environment
        record.transactionId = transaction.transactionId
        record.originalTransactionId = transaction.originalTransactionId
        record.productId = transaction.productId
        record.productType = transaction.type
        record.reason = verified.payload.data?.consumptionRequestReason
        let requestedAt = verified.payload.signedDate ?? record.receivedAt
        record.requestedAt = requestedAt
        record.deadline = requestedAt.addingTimeInterval(ConsumptionRequestRecord.window)

        // Whose purchase it is, and what the ledger knows of them.
        let found = try await store.supportLookup(.transactionId(transaction.transactionId), in: [app])
        let owner = found.transactions.values.first { $0.info.transactionId == transaction.transactionId }.flatMap(found.customer(of:))
        record.customerId = owner
        var customerTransactions: [TransactionInfo] = [transaction]
        var consented = false
        if let owner {
            let ledger = try await store.ledger(for: owner, bundleId: bundleId, environment: environment)
            customerTransactions = ledger.transactions(of: owner, environment: environment).map(\.info).filter { $0.bundleId == bundleId }
            consented =
                try await store.consumptionConsent(CustomerKey(bundleId: bundleId, environment: environment, customerId: owner))?.consented ?? false
        }
        let facts = ConsumptionFacts.of(
            transaction, reason: record.reason, requestedAt: requestedAt, customerTransactions: customerTransactions, consented: consented)
        record.facts = facts
        let (outcome, decidedBy) = (policies[bundleId] ?? ConsumptionPolicy()).decide(facts)
        record.decidedBy = decidedBy
        switch outcome {
        case .answer(let answer):
            record.answer = answer
            record.state = .pending
            record.nextAttemptAt = at
        case .manual:
            record.state = .manual
        case .noAnswer:
            record.state = decidedBy == "not consented" ? .notConsented : .noAnswer
        }
        return record
    }

    /// Sends a due answer; on a failure worth retrying, schedules the next attempt.
    func send(_ due: ConsumptionRequestRecord, at: Date) async -> ConsumptionRequestRecord {
        var record = due
        guard let answer = record.answer, let transactionId = record.transactionId, let bundleId = record.bundleId,
            let environment = record.environment
        else {
            record.state = .failed
            record.lastError = "the request has no answer or no transaction to send it for"
            return record
        }
        // Consent is asked again before each send: a customer who withdrew it since the request was decided (or while it
        // waited for a person) gets no answer; nor does a purchase that names no customer (erased since, or never
        // attributed): there is no one whose consent it could be sent under.
        guard let customer = record.customerId else {
            record.state = .notConsented
            // What the facts say of consent is what stopped it, from now on (they said the consent it was decided under).
            record.facts?.consented = false
            record.lastError = "the purchase names no customer (erased, or never attributed): no consent to send it under"
            return record
        }
        let consent: ConsumptionConsent?
        do {
            consent = try await store.consumptionConsent(CustomerKey(bundleId: bundleId, environment: environment, customerId: customer))
        } catch {
            record.lastError = "the customer's consent could not be read; retrying"
            record.nextAttemptAt = at.addingTimeInterval(30)
            return record
        }
        guard consent?.consented == true else {
            record.state = .notConsented
            record.facts?.consented = false
            record.lastError = "the customer withdrew their consent before the answer was sent"
            return record
        }
        guard let client = clients[VerifierKey(bundleId: bundleId, environment: environment)] else {
            record.state = .failed
            record.lastError = "\(bundleId) has no serverAPI credentials for \(environment.rawValue): nothing can be sent"
            return record
        }
        record.attempts += 1
        let body = answer.request(for: record.productType)
        let called = await withinBudget(budget) { () -> AppStoreServerAPIError? in
            do throws(AppStoreServerAPIError) {
                try await client.sendConsumptionInformation(transactionId, body)
                return nil
            } catch {
                return error
            }
        }
        switch called {
        case .some(.none):
            record.state = .sent
            record.lastError = nil
        case .some(.some(let error)) where !error.isRetryable:
            record.state = .failed
            record.lastError = "the App Store refused it: \(error.detail)"
        case .some(.some(let error)):
            record.lastError = "the App Store failed (\(error.detail)); retrying"
            record.nextAttemptAt = retryTime(after: record.attempts, at: at, appleAsked: error.retryAfter, deadline: record.deadline)
        case .none:
            record.lastError = "the App Store did not answer within \(budget.components.seconds) s; retrying"
            record.nextAttemptAt = retryTime(after: record.attempts, at: at, appleAsked: nil, deadline: record.deadline)
        }
        return record
    }

    /// 30 s, doubled each attempt up to 30 min, ±20 % (never before what Apple asked for), and a last try shortly
    /// before the deadline rather than none.
    func retryTime(after attempts: Int, at: Date, appleAsked: Date?, deadline: Date?) -> Date {
        let base = min(1_800, 30 * pow(2, Double(min(attempts - 1, 10))))
        var next = at.addingTimeInterval(base * Double.random(in: 0.8...1.2))
        if let appleAsked, appleAsked > next { next = appleAsked }
        if let deadline, next >= deadline { next = max(at, deadline.addingTimeInterval(-30)) }
        return next
    }

    /// Writes a request's new state to the audit log (on its customer, or the app's when nobody owns the purchase)
    /// and tells ``outcome``.
    func reached(_ record: ConsumptionRequestRecord) async throws(StorageError) {
        guard record.state != .pending, let customer = record.customerKey else { return }
        outcome(customer.bundleId, record.state.rawValue)
        var request: [String: JSONValue] = ["notificationUUID": .string(record.notificationUUID)]
        if let reason = record.reason { request["reason"] = .string(reason.rawValue) }
        if let answer = record.answer, let data = try? AppStoreJSON.makeEncoder().encode(answer),
            let object = try? AppStoreJSON.makeDecoder().decode(JSONValue.self, from: data)
        {
            request["answer"] = object
        }
        var detail: [String: JSONValue] = ["decidedBy": .string(record.decidedBy ?? "")]
        if let deadline = record.deadline { detail["deadline"] = .string(ISO8601DateFormatter().string(from: deadline)) }
        if let error = record.lastError { detail["reason"] = .string(error) }
        detail["attempts"] = .integer(Int64(record.attempts))
        _ = try await store.recordSupportAction(
            SupportAction(
                at: now(), keyName: record.decidedBy?.hasPrefix("key ") == true ? String(record.decidedBy!.dropFirst(4)) : "consumption-policy",
                customer: customer, action: SupportAction.Kind.consumptionInformation.rawValue, target: record.transactionId, request: request,
                outcome: record.state.rawValue, detail: detail))
    }
}
