package import AppStoreModels
import Foundation

extension LifecycleEngine {
    /// The App Store grants a refund: `REFUND` with the revocation fields; a subscription moves to status 5 and its
    /// family members' copies are revoked (`REVOKE`, with the purchaser's revocation reason).
    ///
    /// - Parameter percentage: `nil` for a full refund, or the refunded share in milliunits (1-99999) for a
    ///   prorated one.
    package mutating func refund(
        transactionId: String,
        reason: RevocationReason = .other,
        percentage: Int? = nil
    ) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            try engine.applyRefund(transactionId: transactionId, reason: reason, percentage: percentage)
        }
    }

    private mutating func applyRefund(transactionId: String, reason: RevocationReason, percentage: Int?) throws(SimulatorError) {
        let record = try transactionRecord(transactionId)
        guard record.info.inAppOwnershipType != .familyShared else {
            throw SimulatorError(.conflict, "transaction \(transactionId) is a family-shared copy; refund the purchaser's")
        }
        guard record.info.revocationDate == nil else {
            throw SimulatorError(.conflict, "transaction \(transactionId) is already refunded")
        }
        if let percentage, !(1...99_999).contains(percentage) {
            throw SimulatorError(.invalidRequest, "a prorated refund's percentage is 1-99999 milliunits, not \(percentage)")
        }
        var info = record.info
        info.revocationDate = state.now
        info.revocationReason = reason
        info.revocationType = percentage == nil ? .refundFull : .refundProrated
        info.revocationPercentage = percentage ?? 100_000
        state.transactions[transactionId]?.info = info
        let modifiedAt = state.now
        state.transactions[transactionId]?.modifiedAt = modifiedAt
        state.refundRequests[transactionId] = nil
        if var subscription = state.subscriptions[info.originalTransactionId],
            subscription.latestTransactionId == transactionId
        {
            subscription.status = .revoked
            subscription.autoRenewEnabled = false
            subscription.gracePeriodExpiresDate = nil
            subscription.billingRetryEndsAt = nil
            state.subscriptions[info.originalTransactionId] = subscription
        }
        try notify(.refund, transactionId: transactionId)
        try revokeFamilyCopies(of: info, reason: reason)
    }

    /// The customer asks for a refund in the app: a subscription's auto-renew turns off
    /// (`DID_CHANGE_RENEWAL_STATUS`/`AUTO_RENEW_DISABLED`), then `CONSUMPTION_REQUEST` asks the developer for
    /// consumption information. ``refund(transactionId:reason:percentage:)`` or ``declineRefund(transactionId:)``
    /// follows.
    package mutating func requestRefund(transactionId: String, reason: ConsumptionRequestReason) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            let record = try engine.transactionRecord(transactionId)
            guard record.info.revocationDate == nil, record.info.inAppOwnershipType != .familyShared else {
                throw SimulatorError(.conflict, "transaction \(transactionId) can't be refunded (already refunded, or a family copy)")
            }
            guard engine.state.refundRequests[transactionId] == nil else {
                throw SimulatorError(.conflict, "a refund request for \(transactionId) is already open")
            }
            engine.state.refundRequests[transactionId] = reason
            if var subscription = engine.state.subscriptions[record.info.originalTransactionId], subscription.autoRenewEnabled,
                subscription.status != .expired
            {
                subscription.autoRenewEnabled = false
                engine.state.subscriptions[subscription.originalTransactionId] = subscription
                try engine.notify(.didChangeRenewalStatus, .autoRenewDisabled, transactionId: subscription.latestTransactionId)
            }
            try engine.notify(.consumptionRequest, transactionId: transactionId, consumptionRequestReason: reason)
        }
    }

    /// The App Store declines an open refund request: `REFUND_DECLINED`.
    package mutating func declineRefund(transactionId: String) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            guard engine.state.refundRequests.removeValue(forKey: transactionId) != nil else {
                throw SimulatorError(.conflict, "no open refund request for transaction \(transactionId)")
            }
            try engine.notify(.refundDeclined, transactionId: transactionId)
        }
    }

    /// A refund is reversed after a dispute: `REFUND_REVERSED`, revocation fields cleared; a subscription whose
    /// period has not ended is active again (its renewal date is unchanged).
    package mutating func reverseRefund(transactionId: String) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            let record = try engine.transactionRecord(transactionId)
            guard record.info.revocationDate != nil, record.info.revocationType != .familyRevoke else {
                throw SimulatorError(.conflict, "transaction \(transactionId) has no refund to reverse")
            }
            var info = record.info
            info.revocationDate = nil
            info.revocationReason = nil
            info.revocationType = nil
            info.revocationPercentage = nil
            engine.state.transactions[transactionId]?.info = info
            let modifiedAt = engine.state.now
            engine.state.transactions[transactionId]?.modifiedAt = modifiedAt
            if var subscription = engine.state.subscriptions[info.originalTransactionId],
                subscription.latestTransactionId == transactionId
            {
                subscription.status = subscription.expiresDate > engine.state.now ? .active : .expired
                engine.state.subscriptions[subscription.originalTransactionId] = subscription
            }
            try engine.notify(.refundReversed, transactionId: transactionId)
        }
    }

    // MARK: - Family Sharing

    /// Puts customers in one family group (up to 6 people: the purchaser and 5 members). Shareable purchases of
    /// any of them are shared with the new members.
    package mutating func formFamily(id: String, members: [String]) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            guard !id.isEmpty else { throw SimulatorError(.invalidRequest, "a family needs an id") }
            let current = engine.state.customers.ids(withKey: .family(id))
            let all = Set(current).union(members)
            guard all.count <= 6 else {
                throw SimulatorError(.invalidRequest, "a family has at most 6 people; '\(id)' would have \(all.count)")
            }
            for member in members {
                let customer = try engine.customer(member)
                if let other = customer.familyId, other != id {
                    throw SimulatorError(.conflict, "customer '\(member)' is already in family '\(other)'")
                }
            }
            for member in members.sorted() where !current.contains(member) {
                engine.state.customers[member]?.familyId = id
                try engine.shareExistingPurchases(with: member)
            }
        }
    }

    /// A member leaves their family: what was shared with them is revoked (`REVOKE`, reason 0), and what they
    /// shared is revoked from the others.
    package mutating func leaveFamily(customerId: String) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            guard try engine.customer(customerId).familyId != nil else {
                throw SimulatorError(.conflict, "customer '\(customerId)' is not in a family")
            }
            let others = Set(engine.familyMembers(of: customerId))
            func affected(owner: String, purchaser: String?) -> Bool {
                guard let purchaser else { return false }
                return (owner == customerId && others.contains(purchaser)) || (purchaser == customerId && others.contains(owner))
            }
            // Only the family's records can be affected: the leaver's and the others'.
            let family: [String] = [customerId] + others.sorted()
            let copies: [SubscriptionRecord] = family.flatMap { engine.state.subscriptions.records(of: $0) }
                .filter { $0.sharedFrom != nil && $0.status != .revoked }
                .sorted { $0.originalTransactionId < $1.originalTransactionId }
            for copy in copies where affected(owner: copy.customerId, purchaser: engine.state.subscriptions[copy.sharedFrom!]?.customerId) {
                try engine.revokeCopy(copy.latestTransactionId, reason: .other)
            }
            let familyTransactions: [TransactionRecord] = family.flatMap { engine.state.transactions.records(of: $0) }
            let shared = familyTransactions.filter {
                $0.info.type == .nonConsumable && $0.info.inAppOwnershipType == .familyShared && $0.info.revocationDate == nil
            }.sorted { $0.info.transactionId < $1.info.transactionId }
            for record in shared where affected(owner: record.customerId, purchaser: engine.purchaser(ofCopy: record)) {
                try engine.revokeCopy(record.info.transactionId, reason: .other)
            }
            engine.state.customers[customerId]?.familyId = nil
        }
    }

    /// The purchaser stops sharing one subscription or non-consumable: every copy is revoked (`REVOKE`, reason 0).
    package mutating func stopSharing(transactionId: String) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            let record = try engine.transactionRecord(transactionId)
            try engine.revokeFamilyCopies(of: record.info, reason: .other)
        }
    }

    /// The purchaser's customer ID for a family-shared non-consumable.
    func purchaser(ofCopy record: TransactionRecord) -> String? {
        familyMembers(of: record.customerId).first { member in
            state.transactions.records(of: member).contains {
                $0.info.productId == record.info.productId && $0.info.inAppOwnershipType == .purchased
                    && $0.info.revocationDate == nil
            }
        }
    }

    /// Shares the member's family's active shareable purchases with a new member.
    private mutating func shareExistingPurchases(with member: String) throws(SimulatorError) {
        for other in familyMembers(of: member) {
            for subscription in state.subscriptions.records(of: other)
            where subscription.sharedFrom == nil && subscription.hasService
                && catalog.product(subscription.productId)?.familyShareable == true
                && subscription.familyCopies[member] == nil
            {
                try shareSubscription(subscription.originalTransactionId, with: member)
            }
            for record in state.transactions.records(of: other)
            where record.info.type == .nonConsumable
                && record.info.inAppOwnershipType == .purchased && record.info.revocationDate == nil
                && catalog.product(record.info.productId)?.familyShareable == true
                && ownedNonConsumable(member, record.info.productId) == nil
            {
                let copy = try shareCopy(of: record.info.transactionId, with: member)
                try notify(.oneTimeCharge, transactionId: copy)
            }
        }
    }

    /// A family member's own copy of a purchase: its own transaction ID, `FAMILY_SHARED`.
    mutating func shareCopy(of transactionId: String, with member: String) throws(SimulatorError) -> String {
        let source = try transactionRecord(transactionId)
        let customer = try customer(member)
        let product = try product(source.info.productId)
        let id = makeTransaction(
            customer: customer, product: product, reason: .purchase, appAccountToken: nil, offer: nil
        )
        state.transactions[id]?.info.inAppOwnershipType = .familyShared
        state.transactions[id]?.info.price = nil
        state.transactions[id]?.info.currency = nil
        if source.info.type == .autoRenewable {
            state.transactions[id]?.info.expiresDate = source.info.expiresDate
        }
        return id
    }

    /// Gives a family member a copy of a purchaser's subscription: `SUBSCRIBED` for the member.
    mutating func shareSubscription(_ originalTransactionId: String, with member: String) throws(SimulatorError) {
        var purchaser = try subscription(originalTransactionId)
        let copyId = try shareCopy(of: purchaser.latestTransactionId, with: member)
        let previous = state.subscriptions.records(of: member).first { $0.sharedFrom == originalTransactionId }
        var copy = SubscriptionRecord(
            originalTransactionId: copyId, customerId: member, bundleId: purchaser.bundleId, groupId: purchaser.groupId,
            productId: purchaser.productId, autoRenewProductId: purchaser.autoRenewProductId,
            expiresDate: purchaser.expiresDate, latestTransactionId: copyId,
            recentSubscriptionStartDate: state.now
        )
        copy.autoRenewEnabled = purchaser.autoRenewEnabled
        copy.status = purchaser.status
        copy.ownership = .familyShared
        copy.sharedFrom = originalTransactionId
        state.subscriptions[copyId] = copy
        purchaser.familyCopies[member] = copyId
        state.subscriptions[originalTransactionId] = purchaser
        try notify(.subscribed, previous == nil ? .initialBuy : .resubscribe, transactionId: copyId)
    }

    /// Applies a purchaser's subscription change to the family members' copies and notifies each member.
    mutating func followPurchaser(
        _ originalTransactionId: String,
        notification type: NotificationType,
        subtype: NotificationSubtype?,
        newTransaction: Bool = false
    ) throws(SimulatorError) {
        let purchaser = try subscription(originalTransactionId)
        for (member, copyId) in purchaser.familyCopies.sorted(by: { $0.key < $1.key }) {
            guard var copy = state.subscriptions[copyId], copy.status != .revoked else { continue }
            if newTransaction {
                let id = try shareCopy(of: purchaser.latestTransactionId, with: member)
                state.transactions[id]?.info.originalTransactionId = copyId
                let copyPurchaseDate = state.transactions[copyId]?.info.purchaseDate
                state.transactions[id]?.info.originalPurchaseDate = copyPurchaseDate
                state.transactions[id]?.info.transactionReason = .renewal
                copy.latestTransactionId = id
            }
            copy.productId = purchaser.productId
            copy.autoRenewProductId = purchaser.autoRenewProductId
            copy.autoRenewEnabled = purchaser.autoRenewEnabled
            copy.status = purchaser.status
            copy.expiresDate = purchaser.expiresDate
            copy.gracePeriodExpiresDate = purchaser.gracePeriodExpiresDate
            copy.billingRetryEndsAt = purchaser.billingRetryEndsAt
            copy.expirationIntent = purchaser.expirationIntent
            state.subscriptions[copyId] = copy
            try notify(type, subtype, transactionId: copy.latestTransactionId)
        }
    }

    /// Revokes every family copy of a purchase (`REVOKE`).
    mutating func revokeFamilyCopies(of info: TransactionInfo, reason: RevocationReason) throws(SimulatorError) {
        if let subscription = state.subscriptions[info.originalTransactionId], subscription.sharedFrom == nil {
            for copyId in subscription.familyCopies.values.sorted() {
                guard let copy = state.subscriptions[copyId], copy.status != .revoked else { continue }
                try revokeCopy(copy.latestTransactionId, reason: reason)
            }
            return
        }
        guard info.type == .nonConsumable else { return }
        let members = familyMembers(of: state.transactions[info.transactionId]?.customerId ?? "")
        for record in members.flatMap({ state.transactions.records(of: $0) }).sorted(by: { $0.info.transactionId < $1.info.transactionId })
        where record.info.productId == info.productId && record.info.inAppOwnershipType == .familyShared
            && record.info.revocationDate == nil
        {
            try revokeCopy(record.info.transactionId, reason: reason)
        }
    }

    /// Revokes one family copy: `REVOKE`, `FAMILY_REVOKE`, status 5 for subscriptions.
    mutating func revokeCopy(_ transactionId: String, reason: RevocationReason) throws(SimulatorError) {
        var info = try transactionRecord(transactionId).info
        info.revocationDate = state.now
        info.revocationReason = reason
        info.revocationType = .familyRevoke
        state.transactions[transactionId]?.info = info
        let modifiedAt = state.now
        state.transactions[transactionId]?.modifiedAt = modifiedAt
        if var copy = state.subscriptions[info.originalTransactionId] {
            copy.status = .revoked
            copy.autoRenewEnabled = false
            state.subscriptions[info.originalTransactionId] = copy
            if let from = copy.sharedFrom {
                state.subscriptions[from]?.familyCopies[copy.customerId] = nil
            }
        }
        try notify(.revoke, transactionId: transactionId)
    }
}
