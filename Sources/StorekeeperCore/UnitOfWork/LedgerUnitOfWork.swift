package import AppStoreModels
package import AppStoreSigning

/// The ledger's writes, each one unit of work run inside one backend transaction: what to load, the rules, what to
/// write, and which customers the write may have changed (announced to read caches after the commit). Each is given
/// as ``LedgerStep``s (`applying`, `submitting`, …) and, for convenience, run in a transaction (`apply(_:in:)`, …).
package enum LedgerUnitOfWork {
    /// Applies a verified notification and everything it carries, once per `notificationUUID`.
    package static func applying(_ notification: VerifiedNotification) -> LedgerStep<(outcome: ApplyOutcome, affected: Set<String>)> {
        applyingTogether([notification]).flatMap { result in .done((result.outcomes[0], result.affected)) }
    }

    /// Applies notifications together, in one transaction, each once per `notificationUUID` (a UUID repeated in the
    /// list is a duplicate after its first), in their order: the same ledger as applying them one after another. One
    /// read asks for the locks of all their families, the claims of all of them, their families and the owners of the
    /// tokens their transactions carry (often all a write needs); one write keeps them. A backend with concurrent
    /// writers uses this to apply the notifications that arrive together as one commit (and a page of recovered
    /// notifications is applied so).
    package static func applyingTogether(_ notifications: [VerifiedNotification]) -> LedgerStep<(outcomes: [ApplyOutcome], affected: Set<String>)> {
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
            // The ledger after each notification of a batch, for the outbox to tell each one's changes apart: taken in
            // the one pass that applies them (their token owners are read after it).
            let outbox = loaded.outboxEnabled
            var steps: [Ledger] = []
            return applyingToLoaded(
                loaded, tokensRead: reads.tokens,
                { ledger in
                    steps.removeAll()
                    for notification in new {
                        ledger.apply(notification)
                        if outbox, new.count > 1 { steps.append(ledger) }
                    }
                }
            ) { before, after in
                let records = new.map { after.notifications[$0.payload.notificationUUID]! }
                var outcomes: [String: ApplyOutcome] = [:]
                for record in records { outcomes[record.notificationUUID] = record.outcome }
                // Each UUID's outcome goes to its first occurrence; a repeat is a duplicate.
                let answers = notifications.map { notification in outcomes.removeValue(forKey: notification.payload.notificationUUID) ?? .duplicate }
                let affected = after.customersAffected(since: before)
                let changes = LedgerChanges(from: before, to: after, notifications: records)
                guard outbox else { return .write(changes, then: .done((answers, affected))) }
                var snapshots = [before]
                if new.count == 1 {
                    snapshots.append(after)
                } else {
                    // Applying never changes a token's owner: each snapshot has the owners read for the whole batch.
                    for var ledger in steps.dropLast() {
                        ledger.tokenOwners = after.tokenOwners
                        snapshots.append(ledger)
                    }
                    snapshots.append(after)
                }
                return .write(
                    changes,
                    then: emittingEvents(
                        snapshots: snapshots, causes: new.map { EventCause.notification($0.payload) }, families: Set(reads.families),
                        changed: new.count == 1 ? nil : new.map { Set(families(touchedBy: $0)) }, affected: affected, then: (answers, affected)))
            }
        }
    }

    /// Applies a page of notifications fetched from the App Store together (``applyingTogether(_:)``: every family of
    /// the page locked at once, so that two instances applying overlapping pages in opposite orders wait for each
    /// other instead of deadlocking), and moves the recovery watermark in the same transaction when given.
    package static func applyingRecovered(
        _ notifications: [VerifiedNotification], watermark: RecoveryWatermark?
    ) -> LedgerStep<(outcomes: [ApplyOutcome], affected: Set<String>)> {
        let step = applyingTogether(notifications)
        guard let watermark else { return step }
        return step.flatMap { result in .setWatermark(watermark, then: .done(result)) }
    }

    /// Applies what the App Store Server API says (reconciliation) under the ledger's rules: each transaction,
    /// renewal info and status replaces the ledger's only when signed later, so older API data never overwrites newer
    /// ledger data. Returns how many records changed.
    package static func applyingSnapshot(_ snapshot: AppStoreSnapshot) -> LedgerStep<(changed: Int, affected: Set<String>)> {
        applyingToFamilies(Array(snapshot.families), { $0.apply(snapshot) }) { before, after in
            let changes = LedgerChanges(from: before, to: after)
            guard !changes.isEmpty else { return .done((0, [])) }
            return .write(
                changes,
                then: emittingEvents(
                    snapshots: [before, after], causes: [EventCause(.reconciliation)], families: snapshot.families,
                    then: (changes.transactions.count + changes.subscriptions.count, after.customersAffected(since: before)))
            )
        }
    }

    /// Applies a transaction the app submitted and links it to the customer, or refuses it (changing nothing) when
    /// its token or its purchase belongs to another customer.
    package static func submitting(
        _ submitted: VerifiedSignedData<TransactionInfo>, customerId: String, policy: RestorePolicy = .keep
    ) -> LedgerStep<(outcome: SubmissionOutcome, affected: Set<String>)> {
        let info = submitted.payload
        guard let environment = info.environment else { return .done((.linked, [])) }
        let submittedToken = LedgerTransaction.tokenKey(of: info)
        var first = LedgerReads(families: [LedgerKey(environment, info.originalTransactionId)], tokens: submittedToken.map { [$0] } ?? [])
        first.erasedTokens = true
        return .read(first) { loaded in
            var ledger = loaded.ledger
            var tokens = ledger.appAccountTokens
            if let submittedToken { tokens.insert(submittedToken) }
            return withOwners(of: tokens, read: first.tokens, from: loaded) { owners in
                ledger.tokenOwners = owners
                if let conflict = ledger.ownershipConflict(linking: info, to: customerId) {
                    guard policy == .transfer else { return .done((.refused(conflict), [])) }
                    return transferring(submitted, to: customerId, in: ledger, reads: first, erased: loaded.erasedTokens)
                }
                let before = ledger
                ledger.apply(info, jws: submitted.jws, source: "app")
                do throws(OwnershipConflict) {
                    try ledger.link(info, to: customerId, erased: loaded.erasedTokens)
                } catch {
                    return .done((.refused(error), []))
                }
                let affected = ledger.customersAffected(since: before)
                return .write(
                    LedgerChanges(from: before, to: ledger),
                    then: emittingEvents(
                        snapshots: [before, ledger], causes: [EventCause(.submission, id: info.transactionId)], families: Set(first.families),
                        affected: affected, then: (.linked, affected)))
            }
        }
    }

    /// The ``RestorePolicy/transfer`` policy's submission: the purchase moves to `customerId` (an explicit link), with
    /// the submitted transaction applied; both customers' events name the move.
    static func transferring(
        _ submitted: VerifiedSignedData<TransactionInfo>, to customerId: String, in ledger: Ledger, reads: LedgerReads,
        erased: Set<AppAccountTokenKey>
    ) -> LedgerStep<(outcome: SubmissionOutcome, affected: Set<String>)> {
        let info = submitted.payload
        var ledger = ledger
        let before = ledger
        let family = before.transactions.values.first {
            $0.info.originalTransactionId == info.originalTransactionId && $0.info.environment == info.environment
        }
        let previous =
            family.flatMap { before.customer(of: $0) } ?? before.explicitLinks[LedgerKey(info.environment ?? .production, info.originalTransactionId)]
        ledger.apply(info, jws: submitted.jws, source: "app")
        ledger.transfer(info, to: customerId, erased: erased)
        let affected = ledger.customersAffected(since: before)
        let cause = EventCause(.submission, id: info.transactionId, transferredFrom: previous, transferredTo: customerId)
        return .write(
            LedgerChanges(from: before, to: ledger),
            then: emittingEvents(
                snapshots: [before, ledger], causes: [cause], families: Set(reads.families), affected: affected, then: (.linked, affected)))
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

    package static func apply(
        _ notification: VerifiedNotification, in transaction: some LedgerWriteTransaction
    ) throws -> (outcome: ApplyOutcome, affected: Set<String>) {
        try applying(notification).run(in: transaction)
    }

    package static func applyRecovered(
        _ notifications: [VerifiedNotification], watermark: RecoveryWatermark?, in transaction: some LedgerWriteTransaction
    ) throws -> (outcomes: [ApplyOutcome], affected: Set<String>) {
        try applyingRecovered(notifications, watermark: watermark).run(in: transaction)
    }

    package static func applySnapshot(
        _ snapshot: AppStoreSnapshot, in transaction: some LedgerWriteTransaction
    ) throws -> (changed: Int, affected: Set<String>) {
        try applyingSnapshot(snapshot).run(in: transaction)
    }

    package static func submit(
        _ submitted: VerifiedSignedData<TransactionInfo>, customerId: String, policy: RestorePolicy = .keep,
        in transaction: some LedgerWriteTransaction
    ) throws -> (outcome: SubmissionOutcome, affected: Set<String>) {
        try submitting(submitted, customerId: customerId, policy: policy).run(in: transaction)
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
