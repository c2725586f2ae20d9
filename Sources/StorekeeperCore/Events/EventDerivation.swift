import AppStoreModels
package import Foundation
import NIOCore

/// The events of one customer's changes, decided from what the customer was and became, never from what a
/// notification claims alone: a change that did not happen to the ledger (a duplicate, an older version, a
/// notification about another customer's purchase) has no event. Pure; the unit of work runs it inside the write's
/// transaction, with the customer's ledger as the transaction sees it.
package enum EventDerivation {
    /// One customer's part of a write.
    package struct Input: Sendable {
        package var customer: CustomerKey
        /// What the outbox last recorded for them (`nil` before anything was).
        package var stored: CustomerStateRecord?
        /// Their ledger in the app (its transactions only): before the write's first change, then after each change.
        package var ledgers: [Ledger]
        /// What caused each change (one fewer than `ledgers`).
        package var causes: [EventCause]
        /// The state JSON of the customer's event numbered `stored.sequence`, when the ledger still holds it: what
        /// the record's digest was made of, unless the record changed since without an event.
        package var lastEventState: String?
        /// What changed the state since it was recorded, when no change of theirs did: time (an expiry, typed
        /// against the state before), or another customer's erasure (a purchase returning to its token's owner: one
        /// `customer.updated`, naming no one erased).
        package var unannouncedCause: EventCause

        package init(
            customer: CustomerKey, stored: CustomerStateRecord?, ledgers: [Ledger], causes: [EventCause], lastEventState: String? = nil,
            unannouncedCause: EventCause = EventCause(.expiry)
        ) {
            self.customer = customer
            self.stored = stored
            self.ledgers = ledgers
            self.causes = causes
            self.lastEventState = lastEventState
            self.unannouncedCause = unannouncedCause
        }
    }

    /// The events, numbered on from the stored sequence, and the state to record (`nil`: nothing to record, the
    /// customer being unknown to the app before and after). Time-driven changes since the stored state (an expiry
    /// nobody announced) come first, caused by ``EventCause/Kind/expiry``; then each change's.
    package static func derive(
        _ input: Input, configuration: EntitlementConfiguration, at now: Date
    ) -> (drafts: [EventDraft], record: CustomerStateRecord?) {
        let key = input.customer
        guard input.stored != nil || input.ledgers.contains(where: { isKnown(key.customerId, in: $0) }) else { return ([], nil) }
        let answers = input.ledgers.map {
            CustomerAnswer(for: key.customerId, in: $0, bundleId: key.bundleId, environment: key.environment, configuration: configuration, at: now)
        }
        // The state before the write is rendered only to compare it with the recorded one (a time-driven change).
        let rendered = answers.indices.map { index in index == 0 && input.stored == nil && answers.count > 1 ? "" : answers[index].jsonText }
        var drafts: [EventDraft] = []
        var sequence = input.stored?.sequence ?? 0
        func emit(_ changes: [(EventType, [String: JSONValue])], cause: EventCause, state: String) {
            for (type, details) in changes {
                sequence += 1
                drafts.append(
                    EventDraft(customer: key, sequence: sequence, type: type, occurredAt: now, cause: cause, changes: details, state: state))
            }
        }
        if let stored = input.stored, !stored.records(rendered[0]) {
            if input.unannouncedCause.kind != .expiry {
                emit([(.customerUpdated, [:])], cause: input.unannouncedCause, state: rendered[0])
            } else if let previous = previous(
                stored, lastEventState: input.lastEventState, ledger: input.ledgers[0], key: key, configuration: configuration)
            {
                emit(
                    changes(from: previous, to: answers[0], ledgers: nil, context: input.ledgers[0], cause: EventCause(.expiry), stateDiffers: true),
                    cause: EventCause(.expiry), state: rendered[0])
            } else {
                emit([(.customerUpdated, [:])], cause: EventCause(.expiry), state: rendered[0])
            }
        }
        for index in input.causes.indices {
            let cause = input.causes[index]
            let found = changes(
                from: answers[index], to: answers[index + 1], ledgers: (input.ledgers[index], input.ledgers[index + 1]),
                context: input.ledgers[index + 1], cause: cause,
                stateDiffers: rendered[index].isEmpty ? !sameState(answers[index], answers[index + 1]) : rendered[index] != rendered[index + 1])
            emit(found, cause: cause, state: rendered[index + 1])
        }
        let last = answers.count - 1
        let record = CustomerStateRecord(
            customer: key, sequence: sequence, state: CustomerStateRecord.digest(of: rendered[last]), validUntil: answers[last].validUntil)
        return (drafts, record)
    }

    /// The answer the outbox recorded, typed: read back from the record's JSON (a ledger written before digests); or
    /// the answer of the same ledger just before the recorded state stopped holding (`validUntil`), when that is the
    /// recorded one (the ledger and the entitlement configuration are as they were); or read back from the customer's
    /// last event, when its state is the recorded one (the configuration changed, or the ledger changed outside the
    /// customer's writes: another customer's erasure). `nil` when none is (that event was pruned): the change is told
    /// as `customer.updated`.
    static func previous(
        _ stored: CustomerStateRecord, lastEventState: String?, ledger: Ledger, key: CustomerKey, configuration: EntitlementConfiguration
    ) -> CustomerAnswer? {
        if let json = stored.recordedJSON { return decode(json) }
        if let validUntil = stored.validUntil {
            let answer = CustomerAnswer(
                for: key.customerId, in: ledger, bundleId: key.bundleId, environment: key.environment, configuration: configuration,
                at: validUntil.addingTimeInterval(-0.001))
            if stored.records(answer.jsonText) { return answer }
        }
        if let lastEventState, stored.records(lastEventState) { return decode(lastEventState) }
        return nil
    }

    /// Whether two answers say the same (what their JSON says: ``CustomerAnswer/validUntil`` aside).
    static func sameState(_ one: CustomerAnswer, _ other: CustomerAnswer) -> Bool {
        var one = one
        one.validUntil = other.validUntil
        return one == other
    }

    /// Whether the ledger (one app's, one environment's) has anything of the customer's: a purchase or a token.
    static func isKnown(_ customerId: String, in ledger: Ledger) -> Bool {
        !ledger.consumableTotals.isEmpty || ledger.tokenOwners.values.contains(customerId)
            || ledger.grants.values.contains { $0.customerId == customerId }
            || ledger.transactions.values.contains { ledger.customer(of: $0) == customerId }
    }

    /// A recorded state read back; an unreadable one (which only a hand-edited ledger holds) as an empty answer.
    static func decode(_ state: String) -> CustomerAnswer? {
        try? AppStoreJSON.makeDecoder().decode(CustomerAnswer.self, from: Data(state.utf8))
    }

    /// The typed changes between two answers, with the ledgers they came from when the change is a write (their
    /// transactions say what a state cannot: a refund, an offer, a consumable, a price-increase consent); `context` is
    /// the ledger the new answer came from (its renewal infos say why a subscription expired).
    static func changes(
        from previous: CustomerAnswer?, to current: CustomerAnswer, ledgers: (before: Ledger, after: Ledger)?, context: Ledger,
        cause: EventCause, stateDiffers: Bool
    ) -> [(EventType, [String: JSONValue])] {
        var found: [(EventType, [String: JSONValue])] = []
        let before = previous?.subscriptions ?? []
        let beforeSubscriptions = Dictionary(before.map { ($0.originalTransactionId, $0) }, uniquingKeysWith: { $1 })
        let afterSubscriptions = Dictionary(current.subscriptions.map { ($0.originalTransactionId, $0) }, uniquingKeysWith: { $1 })
        // Purchases' entitlements by their purchase; promotional grants' apart (they have none).
        let beforeEntitled = Dictionary(
            (previous?.entitlements ?? []).filter { !$0.isPromotional }.map { ($0.originalTransactionId, $0) }, uniquingKeysWith: { $1 })
        let afterEntitled = Dictionary(
            current.entitlements.filter { !$0.isPromotional }.map { ($0.originalTransactionId, $0) }, uniquingKeysWith: { $1 })
        let type = cause.notificationType
        let subtype = cause.subtype

        for id in Set(beforeSubscriptions.keys).union(afterSubscriptions.keys).sorted() {
            let old = beforeSubscriptions[id]
            let new = afterSubscriptions[id]
            var details: [String: JSONValue] = ["originalTransactionId": .string(id), "productId": .string(new?.productId ?? old?.productId ?? "")]
            let latestAfter = ledgers.flatMap { latestTransaction(of: id, in: $0.after) }
            let latestBefore = ledgers.flatMap { latestTransaction(of: id, in: $0.before) }
            guard let new else {
                if let to = cause.transferredTo {
                    details["to"] = .string(to)
                    found.append((.customerTransferredOut, details))
                } else {
                    found.append((.customerUpdated, details))
                }
                continue
            }
            guard let old else {
                if let latestAfter { details["transactionId"] = .string(latestAfter.transactionId) }
                if let from = cause.transferredFrom {
                    details["from"] = .string(from)
                    found.append((.customerTransferredIn, details))
                    continue
                }
                found.append((.subscriptionStarted, details))
                if let offer = offerDetails(latestAfter) { found.append((.subscriptionOfferRedeemed, details.merging(offer) { $1 })) }
                continue
            }
            // Each event has the subject and its own fields only (not the fields of the events before it).
            let subject = details
            var named = false
            let wasEntitled = beforeEntitled[id]
            let isEntitled = afterEntitled[id]
            let newTransaction = latestAfter != nil && latestAfter?.transactionId != latestBefore?.transactionId
            if old.productId != new.productId {
                var changed = subject
                changed["previousProductId"] = .string(old.productId)
                changed["direction"] = .string(
                    subtype == NotificationSubtype.upgrade.rawValue
                        ? "upgrade" : subtype == NotificationSubtype.downgrade.rawValue ? "downgrade" : "crossgrade")
                found.append((.subscriptionProductChanged, changed))
                named = true
            } else if let was = old.expiresDate, let now = new.expiresDate, now > was {
                var dates = subject
                dates["previousExpiresDate"] = .integer(was.epochMilliseconds)
                dates["expiresDate"] = .integer(now.epochMilliseconds)
                if type == NotificationType.renewalExtended.rawValue || type == NotificationType.renewalExtension.rawValue
                    || !newTransaction && latestAfter != nil
                {
                    found.append((.subscriptionRenewalExtended, dates))
                } else if old.isInBillingRetryPeriod == true || wasEntitled?.inGracePeriod == true || wasEntitled?.inBillingRetry == true {
                    found.append((.subscriptionBillingRecovered, dates))
                } else {
                    found.append((.subscriptionRenewed, dates))
                }
                named = true
            }
            if newTransaction, let offer = offerDetails(latestAfter) {
                found.append((.subscriptionOfferRedeemed, subject.merging(offer) { $1 }))
            } else if !newTransaction, type == NotificationType.offerRedeemed.rawValue, let ledgers,
                let offer = pendingOfferDetails(after: ledgers.after.subscriptions[LedgerKey(current.environmentValue, id)]?.renewalInfo)
            {
                // An offer redeemed on an active subscription, from its next renewal on: no transaction yet.
                found.append((.subscriptionOfferRedeemed, subject.merging(offer) { $1 }))
                named = true
            }
            if wasEntitled != nil, isEntitled == nil {
                if let latestAfter, latestAfter.revocationDate != nil {
                    let revoked = latestAfter.inAppOwnershipType == .familyShared || type == NotificationType.revoke.rawValue
                    found.append((revoked ? .purchaseRevoked : .purchaseRefunded, subject.merging(revocationDetails(latestAfter)) { $1 }))
                } else {
                    var expired = subject
                    expired["reason"] = .string(
                        expiryReason(cause: cause, renewal: context.subscriptions[LedgerKey(current.environmentValue, id)]?.renewalInfo))
                    found.append((.subscriptionExpired, expired))
                }
                named = true
            } else if wasEntitled == nil, isEntitled != nil, !named {
                if let latestBefore, latestBefore.revocationDate != nil, latestAfter?.revocationDate == nil {
                    found.append((.purchaseRefundReversed, subject))
                } else {
                    found.append((.subscriptionRenewed, subject))
                }
                named = true
            }
            if new.isInBillingRetryPeriod == true, old.isInBillingRetryPeriod != true {
                found.append((isEntitled?.inGracePeriod == true ? .subscriptionGracePeriodStarted : .subscriptionBillingIssue, subject))
                named = true
            }
            // A first renewal info (unknown before: a purchase the app submitted) is not a change of the customer's mind.
            if let autoRenew = new.autoRenew, let was = old.autoRenew, autoRenew != was {
                found.append((autoRenew ? .subscriptionAutoRenewEnabled : .subscriptionAutoRenewDisabled, subject))
                named = true
            }
            if let renewTo = new.autoRenewProductId, renewTo != old.autoRenewProductId, old.autoRenewProductId != nil,
                renewTo != new.productId || old.productId == new.productId
            {
                var renewal = subject
                renewal["autoRenewProductId"] = .string(renewTo)
                if let from = old.autoRenewProductId { renewal["previousAutoRenewProductId"] = .string(from) }
                found.append((.subscriptionRenewalProductChanged, renewal))
                named = true
            }
            if let ledgers {
                let key = LedgerKey(current.environmentValue, id)
                let was = ledgers.before.subscriptions[key]?.renewalInfo?.priceIncreaseStatus
                if let status = ledgers.after.subscriptions[key]?.renewalInfo?.priceIncreaseStatus, status != was {
                    found.append(
                        (
                            .subscriptionPriceIncrease,
                            subject.merging(["priceIncreaseStatus": .string(status == .accepted ? "accepted" : "pending")]) { $1 }
                        ))
                    named = true
                }
            }
            if !named, old != new || wasEntitled != isEntitled {
                if old.status == new.status, wasEntitled == isEntitled {
                    // Only what the answer says of the notification behind the status (`statusFromNotification`) or
                    // a field no type names: not a change of status.
                    found.append((.customerUpdated, subject))
                } else {
                    var status = subject
                    if let value = new.status { status["status"] = .integer(Int64(value)) }
                    found.append((.subscriptionStatusChanged, status))
                }
            }
        }

        // One-time purchases: what their transactions say (a write), or their entitlements (time).
        if let ledgers {
            let customerId = current.customerId
            let environment = current.environmentValue
            for key in ledgers.after.transactions.keys.sorted() {
                guard let transaction = ledgers.after.transactions[key], transaction.info.type != .autoRenewable,
                    ledgers.after.customer(of: transaction) == customerId, transaction.info.environment == environment
                else { continue }
                let info = transaction.info
                let earlier = ledgers.before.transactions[key].flatMap { ledgers.before.customer(of: $0) == customerId ? $0.info : nil }
                var details: [String: JSONValue] = [
                    "transactionId": .string(info.transactionId), "originalTransactionId": .string(info.originalTransactionId),
                    "productId": .string(info.productId),
                ]
                let consumable = info.type == .consumable
                if consumable { details["quantity"] = .integer(Int64(info.quantity ?? 1)) }
                if earlier == nil, let from = cause.transferredFrom {
                    found.append((.customerTransferredIn, details.merging(["from": .string(from)]) { $1 }))
                } else if earlier == nil {
                    if info.revocationDate == nil { found.append((consumable ? .consumableGranted : .purchaseCompleted, details)) }
                } else if let earlier, earlier.revocationDate == nil, info.revocationDate != nil {
                    let revoked = info.inAppOwnershipType == .familyShared || type == NotificationType.revoke.rawValue
                    found.append(
                        (
                            consumable ? .consumableRefunded : revoked ? .purchaseRevoked : .purchaseRefunded,
                            details.merging(revocationDetails(info)) { $1 }
                        ))
                } else if let earlier, earlier.revocationDate != nil, info.revocationDate == nil {
                    found.append((.purchaseRefundReversed, details))
                }
            }
            // One-time purchases that moved to another customer.
            if let to = cause.transferredTo {
                for (key, transaction) in ledgers.before.transactions.sorted(by: { $0.key < $1.key }) where transaction.info.type != .autoRenewable {
                    guard ledgers.before.customer(of: transaction) == customerId,
                        ledgers.after.transactions[key].map({ ledgers.after.customer(of: $0) == customerId }) != true
                    else { continue }
                    found.append(
                        (
                            .customerTransferredOut,
                            [
                                "transactionId": .string(transaction.info.transactionId), "productId": .string(transaction.info.productId),
                                "originalTransactionId": .string(transaction.info.originalTransactionId), "to": .string(to),
                            ]
                        ))
                }
            }
        } else {
            for (id, entitlement) in beforeEntitled.sorted(by: { $0.key < $1.key })
            where entitlement.productType == .nonRenewing && afterEntitled[id] == nil {
                found.append(
                    (
                        .purchaseExpired,
                        [
                            "originalTransactionId": .string(id), "productId": .string(entitlement.productId),
                            "transactionId": .string(entitlement.transactionId),
                        ]
                    ))
            }
        }
        found += grantChanges(from: previous, to: current, after: ledgers?.after)
        if found.isEmpty, stateDiffers { found.append((.customerUpdated, [:])) }
        return found
    }

    /// Promotional grants that began or ended between two answers: ended by a revocation when the ledger after the
    /// change says so, else by time.
    static func grantChanges(from previous: CustomerAnswer?, to current: CustomerAnswer, after: Ledger?) -> [(EventType, [String: JSONValue])] {
        func grants(_ answer: CustomerAnswer?) -> [String: Entitlement] {
            Dictionary(
                (answer?.entitlements ?? []).compactMap { entitlement in entitlement.grantId.map { ($0, entitlement) } }, uniquingKeysWith: { $1 })
        }
        let before = grants(previous)
        let now = grants(current)
        var found: [(EventType, [String: JSONValue])] = []
        for id in Set(before.keys).symmetricDifference(now.keys).sorted() {
            guard let entitlement = now[id] ?? before[id] else { continue }
            var details: [String: JSONValue] = ["grantId": .string(id), "entitlement": .string(entitlement.entitlement)]
            if let expires = entitlement.expiresDate { details["expiresDate"] = .integer(expires.epochMilliseconds) }
            if now[id] != nil {
                found.append((.promotionalGranted, details))
            } else if let grant = after?.grants[id], let revoked = grant.revokedAt {
                details["revokedAt"] = .integer(revoked.epochMilliseconds)
                found.append((.promotionalRevoked, details))
            } else {
                found.append((.promotionalExpired, details))
            }
        }
        return found
    }

    static func latestTransaction(of originalTransactionId: String, in ledger: Ledger) -> TransactionInfo? {
        // One pass, copying only the latest so far (a transaction is a large value).
        var latest: LedgerKey?
        for (key, transaction) in ledger.transactions
        where transaction.info.originalTransactionId == originalTransactionId && transaction.info.type == .autoRenewable {
            if let current = latest.flatMap({ ledger.transactions[$0] }), !transaction.isLater(than: current) { continue }
            latest = key
        }
        return latest.flatMap { ledger.transactions[$0]?.info }
    }

    static func offerDetails(_ info: TransactionInfo?) -> [String: JSONValue]? {
        guard let info, let offerType = info.offerType else { return nil }
        var details: [String: JSONValue] = ["offerType": .integer(Int64(offerType.rawValue)), "transactionId": .string(info.transactionId)]
        if let identifier = info.offerIdentifier { details["offerIdentifier"] = .string(identifier) }
        return details
    }

    /// The offer a renewal info says applies from the next renewal (an `OFFER_REDEEMED` notification's: redeemed
    /// again, the same offer is a redemption again).
    static func pendingOfferDetails(after: RenewalInfo?) -> [String: JSONValue]? {
        guard let after, let offerType = after.offerType else { return nil }
        var details: [String: JSONValue] = ["offerType": .integer(Int64(offerType.rawValue))]
        if let identifier = after.offerIdentifier { details["offerIdentifier"] = .string(identifier) }
        return details
    }

    static func revocationDetails(_ info: TransactionInfo) -> [String: JSONValue] {
        var details: [String: JSONValue] = ["transactionId": .string(info.transactionId)]
        if let date = info.revocationDate { details["revocationDate"] = .integer(date.epochMilliseconds) }
        if let reason = info.revocationReason { details["revocationReason"] = .integer(Int64(reason.rawValue)) }
        return details
    }

    /// Why access ended: the notification's subtype, else the renewal info's expiration intent, else time.
    static func expiryReason(cause: EventCause, renewal: RenewalInfo?) -> String {
        if cause.notificationType == NotificationType.gracePeriodExpired.rawValue { return "grace_period_ended" }
        switch cause.subtype {
        case NotificationSubtype.voluntary.rawValue: return "voluntary"
        case NotificationSubtype.billingRetry.rawValue: return "billing_error"
        case NotificationSubtype.priceIncrease.rawValue: return "price_increase"
        case NotificationSubtype.productNotForSale.rawValue: return "product_not_for_sale"
        default: break
        }
        switch renewal?.expirationIntent {
        case .customerCancelled?: return "voluntary"
        case .billingError?: return "billing_error"
        case .didNotConsentToPriceIncrease?: return "price_increase"
        case .productUnavailable?: return "product_not_for_sale"
        case .some: return "unknown"
        case nil: break
        }
        if renewal?.autoRenewStatus == .off { return "voluntary" }
        return cause.kind == .expiry ? "time" : "unknown"
    }
}

extension CustomerAnswer {
    /// The environment of the answer, typed.
    var environmentValue: AppStoreEnvironment { AppStoreEnvironment(rawValue: environment) }
}
