import AppStoreModels
package import Foundation

extension LifecycleEngine {
    // MARK: - The clock

    /// The latest the clock may reach: dates are epoch milliseconds on the wire, and a clock past year 9999 (or far
    /// enough past it, an `Int64` of milliseconds) could not be written back.
    package static let latestClock = Date(timeIntervalSince1970: 253_402_300_799.999)
    /// The longest one advance moves the clock: 100 years (each renewal on the way is played).
    package static let longestAdvance: TimeInterval = 36_525 * 86_400

    /// Refuses a forward move of the clock past ``latestClock`` or longer than ``longestAdvance``, before anything is
    /// played (every way of moving it comes here: the control API, scenarios, the engine).
    package static func checkAdvance(from now: Date, to target: Date) throws(SimulatorError) {
        guard target <= latestClock else { throw SimulatorError(.invalidRequest, "the clock must stay before the year 10000") }
        // A millisecond's leeway: `to` arrives in milliseconds, and 100 years is 100 years however it is written.
        guard target.timeIntervalSince(now) <= longestAdvance + 0.001 else {
            throw SimulatorError(.invalidRequest, "the clock moves at most 100 years (36525 days) at once")
        }
    }

    /// Moves the clock forward by `interval`, playing everything that falls due on the way.
    package mutating func advance(by interval: TimeInterval) throws(SimulatorError) {
        guard interval >= 0 else { throw SimulatorError(.invalidRequest, "the clock only moves forward") }
        try advance(to: state.now.addingTimeInterval(interval))
    }

    /// Moves the clock to `target`, playing renewals, grace expiries and billing-retry expiries in time order, as one
    /// action. Notifications that fall due on the way are left for the deliverer; a served simulator moves its clock
    /// with ``Simulator/advance(to:deliver:)`` instead, which delivers each at its own time.
    package mutating func advance(to target: Date) throws(SimulatorError) {
        guard target >= state.now else {
            throw SimulatorError(.invalidRequest, "the clock only moves forward (now \(state.now.formatted(.iso8601)))")
        }
        try Self.checkAdvance(from: state.now, to: target)
        try transaction { (engine) throws(SimulatorError) in
            while let (date, originalTransactionId) = engine.state.subscriptions.firstDue(atOrBefore: target) {
                engine.state.now = max(engine.state.now, date)
                try engine.playDueEvent(originalTransactionId)
            }
            engine.state.now = target
        }
    }

    /// Moves the clock to the next moment something falls due — a renewal, a grace or billing-retry expiry, or
    /// (when there is somewhere to deliver to) a notification's next delivery attempt — or to `target` if nothing
    /// falls due before it, and plays every subscription event due then. Returns whether the clock reached `target`.
    ///
    /// One step is one action; stepping until it returns `true`, delivering what is due after each step, plays an
    /// advance with every renewal, delivery and retry at its own virtual time.
    package mutating func step(toward target: Date) throws(SimulatorError) -> Bool {
        guard target > state.now else { return true }
        return try transaction { (engine) throws(SimulatorError) in
            var next = target
            if let (date, _) = engine.state.subscriptions.firstDue(atOrBefore: target) { next = min(next, date) }
            if engine.state.notificationURL != nil, let attempt = engine.state.notifications.nextAttempt(after: engine.state.now) {
                next = min(next, attempt)
            }
            engine.state.now = max(engine.state.now, next)
            while let (_, originalTransactionId) = engine.state.subscriptions.firstDue(atOrBefore: engine.state.now) {
                try engine.playDueEvent(originalTransactionId)
            }
            return engine.state.now >= target
        }
    }

    private mutating func playDueEvent(_ originalTransactionId: String) throws(SimulatorError) {
        let subscription = try subscription(originalTransactionId)
        switch subscription.status {
        case .active: try attemptRenewal(subscription)
        case .billingGracePeriod: try endGracePeriod(subscription)
        case .billingRetry: try expire(subscription, subtype: .billingRetry, intent: .billingError)
        default: break
        }
    }

    // MARK: - Renewal

    /// Sandbox auto-renewables renew at most 12 times after a purchase at the accelerated rates; the 13th
    /// attempt turns auto-renew off (Apple's "Testing an auto-renewable subscription").
    static let sandboxRenewalLimit = 12

    private mutating func attemptRenewal(_ subscription: SubscriptionRecord) throws(SimulatorError) {
        guard subscription.autoRenewEnabled else {
            return try expire(subscription, subtype: .voluntary, intent: .customerCancelled)
        }
        if state.environment == .sandbox && state.renewalRate != .realTime
            && subscription.renewalCount >= Self.sandboxRenewalLimit
        {
            var stopped = subscription
            stopped.autoRenewEnabled = false
            state.subscriptions[subscription.originalTransactionId] = stopped
            return try expire(stopped, subtype: .voluntary, intent: .customerCancelled)
        }
        if state.removedFromSale.contains(subscription.autoRenewProductId) {
            return try expire(subscription, subtype: .productNotForSale, intent: .productUnavailable)
        }
        if let increase = subscription.priceIncrease, increase.consentRequired, !increase.accepted {
            return try expire(subscription, subtype: .priceIncrease, intent: .didNotConsentToPriceIncrease)
        }
        let customer = try customer(subscription.customerId)
        guard customer.billingWorks else { return try failRenewal(subscription) }
        try renew(subscription, at: subscription.expiresDate, subtype: nil)
    }

    /// A successful renewal: a new transaction (on the auto-renew product: a scheduled downgrade takes effect).
    private mutating func renew(
        _ subscription: SubscriptionRecord,
        at start: Date,
        subtype: NotificationSubtype?
    ) throws(SimulatorError) {
        let customer = try customer(subscription.customerId)
        let product = try product(subscription.autoRenewProductId)
        var updated = subscription
        let offer = subscription.pendingOffer.map(\.offer)
        let id = makeTransaction(
            customer: customer, product: product, reason: .renewal,
            originalTransactionId: subscription.originalTransactionId, appAccountToken: subscription.appAccountToken,
            offer: offer, purchaseDate: start
        )
        if offer == nil, let increase = subscription.priceIncrease, product.productId == subscription.productId {
            state.transactions[id]?.info.price = increase.newPrice
        }
        if let pending = subscription.pendingOffer {
            updated.pendingOffer =
                pending.remainingPeriods > 1
                ? .init(offer: pending.offer, remainingPeriods: pending.remainingPeriods - 1) : nil
        }
        updated.renewalCount += subtype == nil ? 1 : 0
        updated.beginPeriod(with: state.transactions[id]!.info)
        if updated.priceIncrease != nil && product.productId == subscription.productId { updated.priceIncrease = nil }
        state.subscriptions[subscription.originalTransactionId] = updated
        try notify(.didRenew, subtype, transactionId: id)
        try followPurchaser(updated.originalTransactionId, notification: .didRenew, subtype: subtype, newTransaction: true)
    }

    /// Billing failed at renewal: Billing Grace Period if the group has one, billing retry otherwise.
    private mutating func failRenewal(_ subscription: SubscriptionRecord) throws(SimulatorError) {
        var updated = subscription
        let group = catalog.group(subscription.groupId)
        let period = catalog.product(subscription.productId)?.period ?? .oneMonth
        updated.expirationIntent = .billingError
        updated.billingRetryEndsAt = subscription.expiresDate.addingTimeInterval(state.renewalRate.billingRetryDuration)
        let subtype: NotificationSubtype?
        if let days = group?.gracePeriodDays, days > 0 {
            updated.status = .billingGracePeriod
            updated.gracePeriodExpiresDate = subscription.expiresDate.addingTimeInterval(
                state.renewalRate.gracePeriod(days: days, period: period)
            )
            subtype = .gracePeriod
        } else {
            updated.status = .billingRetry
            subtype = nil
        }
        state.subscriptions[subscription.originalTransactionId] = updated
        try notify(.didFailToRenew, subtype, transactionId: subscription.latestTransactionId)
        try followPurchaser(subscription.originalTransactionId, notification: .didFailToRenew, subtype: subtype)
    }

    /// Billing Grace Period ended without recovery: service stops, billing retry goes on.
    private mutating func endGracePeriod(_ subscription: SubscriptionRecord) throws(SimulatorError) {
        var updated = subscription
        updated.status = .billingRetry
        state.subscriptions[subscription.originalTransactionId] = updated
        try notify(.gracePeriodExpired, transactionId: subscription.latestTransactionId)
        try followPurchaser(subscription.originalTransactionId, notification: .gracePeriodExpired, subtype: nil)
    }

    /// The subscription ends: `EXPIRED` with the reason's subtype.
    mutating func expire(
        _ subscription: SubscriptionRecord,
        subtype: NotificationSubtype?,
        intent: ExpirationIntent
    ) throws(SimulatorError) {
        var updated = subscription
        updated.status = .expired
        updated.expirationIntent = intent
        updated.gracePeriodExpiresDate = nil
        updated.billingRetryEndsAt = nil
        updated.pendingOffer = nil
        if intent == .productUnavailable || intent == .didNotConsentToPriceIncrease { updated.autoRenewEnabled = false }
        state.subscriptions[subscription.originalTransactionId] = updated
        try notify(.expired, subtype, transactionId: subscription.latestTransactionId)
        try followPurchaser(subscription.originalTransactionId, notification: .expired, subtype: subtype)
    }

    // MARK: - Customer actions

    /// Turns a customer's payment method off (renewals fail) or on again (subscriptions in grace or billing retry
    /// recover at once: `DID_RENEW`/`BILLING_RECOVERY`).
    package mutating func setBilling(customerId: String, works: Bool) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            _ = try engine.customer(customerId)
            engine.state.customers[customerId]?.billingWorks = works
            guard works else { return }
            let retrying = engine.state.subscriptions.records(of: customerId).filter {
                $0.sharedFrom == nil && ($0.status == .billingRetry || $0.status == .billingGracePeriod)
            }
            for subscription in retrying {
                // In grace the customer lost no days: the period starts at the old expiry. After grace, it starts now.
                let start = subscription.status == .billingGracePeriod ? subscription.expiresDate : engine.state.now
                try engine.renew(subscription, at: start, subtype: .billingRecovery)
            }
        }
    }

    /// Turns auto-renew off or on: `DID_CHANGE_RENEWAL_STATUS`.
    package mutating func setAutoRenew(originalTransactionId: String, enabled: Bool) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            var subscription = try engine.subscription(originalTransactionId)
            guard subscription.sharedFrom == nil else {
                throw SimulatorError(.conflict, "auto-renew of a family-shared copy is the purchaser's to change")
            }
            guard subscription.status != .expired && subscription.status != .revoked else {
                throw SimulatorError(.conflict, "subscription \(originalTransactionId) has ended; buy it again to resubscribe")
            }
            guard subscription.autoRenewEnabled != enabled else {
                throw SimulatorError(.conflict, "auto-renew is already \(enabled ? "on" : "off")")
            }
            subscription.autoRenewEnabled = enabled
            engine.state.subscriptions[originalTransactionId] = subscription
            let subtype: NotificationSubtype = enabled ? .autoRenewEnabled : .autoRenewDisabled
            try engine.notify(.didChangeRenewalStatus, subtype, transactionId: subscription.latestTransactionId)
            try engine.followPurchaser(originalTransactionId, notification: .didChangeRenewalStatus, subtype: subtype)
        }
    }

    // MARK: - Developer actions

    /// Announces a price increase for every subscriber of `productId` whose subscription is not over:
    /// `PRICE_INCREASE`/`PENDING` when consent is needed, `PRICE_INCREASE`/`ACCEPTED` when it is not.
    package mutating func announcePriceIncrease(
        productId: String,
        newPrices: [String: Int64],
        consentRequired: Bool
    ) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            let product = try engine.product(productId)
            guard product.type == .autoRenewable else {
                throw SimulatorError(.invalidRequest, "price increases apply to auto-renewable subscriptions")
            }
            let affected = engine.state.subscriptions.values.filter {
                $0.autoRenewProductId == productId && $0.sharedFrom == nil && $0.status != .expired && $0.status != .revoked
            }.sorted { $0.originalTransactionId < $1.originalTransactionId }
            for var subscription in affected {
                let storefront = try engine.customer(subscription.customerId).storefront
                guard let price = newPrices[storefront], price > (product.prices[storefront] ?? 0) else { continue }
                subscription.priceIncrease = .init(newPrice: price, consentRequired: consentRequired, accepted: !consentRequired)
                engine.state.subscriptions[subscription.originalTransactionId] = subscription
                try engine.notify(.priceIncrease, consentRequired ? .pending : .accepted, transactionId: subscription.latestTransactionId)
            }
        }
    }

    /// The customer consents to a pending price increase: `PRICE_INCREASE`/`ACCEPTED`.
    package mutating func consentToPriceIncrease(originalTransactionId: String) throws(SimulatorError) {
        try transaction { (engine) throws(SimulatorError) in
            var subscription = try engine.subscription(originalTransactionId)
            guard var increase = subscription.priceIncrease, increase.consentRequired, !increase.accepted else {
                throw SimulatorError(.conflict, "subscription \(originalTransactionId) has no price increase awaiting consent")
            }
            increase.accepted = true
            subscription.priceIncrease = increase
            engine.state.subscriptions[originalTransactionId] = subscription
            try engine.notify(.priceIncrease, .accepted, transactionId: subscription.latestTransactionId)
        }
    }

    /// Takes a product off sale: its subscriptions end at their next renewal (`EXPIRED`/`PRODUCT_NOT_FOR_SALE`).
    package mutating func removeFromSale(productId: String) throws(SimulatorError) {
        _ = try product(productId)
        state.removedFromSale.insert(productId)
    }

    /// Extends one subscription's renewal date (API: Extend a Subscription Renewal Date). Returns the new expiry.
    ///
    /// Apple's rules: 1-90 days; only active auto-renewables with at least one paid period, not in billing retry,
    /// not in grace past expiry, at most twice in 365 days; family-shared copies are refused (the purchaser's
    /// extension extends them). Sends `RENEWAL_EXTENDED`.
    package mutating func extendRenewalDate(
        originalTransactionId: String,
        days: Int
    ) throws(SimulatorError) -> (effectiveDate: Date, webOrderLineItemId: String?) {
        try transaction { (engine) throws(SimulatorError) in
            guard APIRequestRules.extendByDays.contains(days) else {
                throw SimulatorError(.invalidRequest, "extendByDays must be 1-90, not \(days)", apiErrorCode: 4_000_009)
            }
            var subscription = try engine.subscription(originalTransactionId)
            guard subscription.sharedFrom == nil else {
                throw SimulatorError(.conflict, "family-shared subscriptions can't be extended directly", apiErrorCode: 4_030_007)
            }
            guard subscription.status == .active, subscription.paidPeriods >= 1,
                subscription.pendingOffer?.offer.discountType != .freeTrial
            else {
                throw SimulatorError(
                    .conflict, "subscription state ineligible for extension (status \(subscription.status))",
                    apiErrorCode: 4_030_004
                )
            }
            let yearAgo = engine.state.now.addingTimeInterval(-365 * 86_400)
            guard subscription.extensionDates.filter({ $0 > yearAgo }).count < 2 else {
                throw SimulatorError(.conflict, "subscription has reached maximum extension count", apiErrorCode: 4_030_005)
            }
            let delta = engine.state.renewalRate.duration(days: Double(days))
            subscription.expiresDate = subscription.expiresDate.addingTimeInterval(delta)
            subscription.extensionDates.append(engine.state.now)
            engine.state.subscriptions[originalTransactionId] = subscription
            engine.state.transactions[subscription.latestTransactionId]?.info.expiresDate = subscription.expiresDate
            let modifiedAt = engine.state.now
            engine.state.transactions[subscription.latestTransactionId]?.modifiedAt = modifiedAt
            try engine.notify(.renewalExtended, transactionId: subscription.latestTransactionId)
            for copy in subscription.familyCopies.values.sorted() {
                guard var shared = engine.state.subscriptions[copy], shared.status == .active else { continue }
                shared.expiresDate = subscription.expiresDate
                engine.state.subscriptions[copy] = shared
                engine.state.transactions[shared.latestTransactionId]?.info.expiresDate = subscription.expiresDate
                try engine.notify(.renewalExtended, transactionId: shared.latestTransactionId)
            }
            let web = engine.state.transactions[subscription.latestTransactionId]?.info.webOrderLineItemId
            return (subscription.expiresDate, web)
        }
    }
}
