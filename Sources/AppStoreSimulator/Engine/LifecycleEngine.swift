import AppStoreModels
package import AppStoreReceipts
package import AppStoreSigning
package import Foundation

/// The simulated App Store's rules: sells, renews, fails billing, refunds, shares with families and records the
/// notifications Apple would send, each signed with the simulator's certificate chain (APPSTORE-SPEC §2.3-§2.4, §4).
///
/// A value type over ``SimulatorState``: every operation either applies completely or throws and changes nothing
/// (it works on a copy that replaces the state only on success). Time moves only through ``advance(to:)``, which
/// plays every renewal, grace expiry and billing-retry expiry that falls due, in time order.
package struct LifecycleEngine: Sendable {
    package let catalog: Catalog
    package internal(set) var state: SimulatorState
    let signer: JWSSigner
    /// Signs app receipts (``appReceipt(customerId:bundleId:)``); `nil`: this engine issues none.
    package var receiptSigner: ReceiptSigner?
    /// The key that signs the developer's offers (promotional and win-back, introductory eligibility); `nil`: offers
    /// are taken unsigned.
    package var offerKey: OfferKey?
    /// The private half, for scenarios only: their offer purchases are signed as the developer's server would.
    package var scenarioOfferKey: AppStoreAPIKey?
    /// Send Consumption Information requests accepted since the engine was loaded, by transaction ID (not saved: a
    /// test's and an operator's count of how many times a developer answered).
    package internal(set) var consumptionInformationReceived: [String: Int] = [:]

    /// Production's notification retry schedule: hours after the previous attempt (at most 6 attempts in all).
    package static let retryScheduleHours: [Double] = [1, 12, 24, 48, 72]

    /// ``SimulatorState/offsetIdentifiers(by:)``: IDs that do not collide with another engine's.
    package mutating func offsetIdentifiers(by amount: Int64) {
        state.offsetIdentifiers(by: amount)
    }

    package init(catalog: Catalog, state: SimulatorState, signer: JWSSigner) throws(SimulatorError) {
        try catalog.validate()
        self.catalog = catalog
        self.state = state
        self.signer = signer
    }

    /// Applies `change` in place and, if it throws, undoes everything it wrote (the tables journal each write while
    /// an action runs; see ``SimulatorState/beginJournal()``), so the cost of an action does not depend on the size of
    /// the state. Actions nest: an inner failure that the outer action catches undoes only the inner one's writes.
    mutating func transaction<Result>(
        _ change: (inout LifecycleEngine) throws(SimulatorError) -> Result
    ) throws(SimulatorError) -> Result {
        let mark = state.beginJournal()
        do {
            let result = try change(&self)
            state.endJournal()
            return result
        } catch {
            state.rollBack(to: mark)
            throw error
        }
    }

    // MARK: - Customers and families

    /// Creates an Apple Account in a storefront.
    @discardableResult
    package mutating func createCustomer(id: String, storefront: String = "USA") throws(SimulatorError) -> Customer {
        guard !id.isEmpty, id.count <= 128 else {
            throw SimulatorError(.invalidRequest, "customer id must be 1-128 characters")
        }
        guard state.customers[id] == nil else { throw SimulatorError(.conflict, "customer '\(id)' already exists") }
        guard Storefront.find(storefront) != nil else {
            let known = Storefront.all.map(\.countryCode).joined(separator: ", ")
            throw SimulatorError(.invalidRequest, "unknown storefront '\(storefront)'; known: \(known)")
        }
        let customer = Customer(id: id, storefront: storefront)
        state.customers[id] = customer
        return customer
    }

    func customer(_ id: String) throws(SimulatorError) -> Customer {
        guard let customer = state.customers[id] else { throw SimulatorError(.notFound, "no customer '\(id)'") }
        return customer
    }

    func product(_ id: String) throws(SimulatorError) -> Catalog.Product {
        guard let product = catalog.product(id) else { throw SimulatorError(.notFound, "no product '\(id)' in the catalog") }
        return product
    }

    func subscription(_ originalTransactionId: String) throws(SimulatorError) -> SubscriptionRecord {
        guard let subscription = state.subscriptions[originalTransactionId] else {
            throw SimulatorError(.notFound, "no subscription with original transaction ID '\(originalTransactionId)'")
        }
        return subscription
    }

    func transactionRecord(_ id: String) throws(SimulatorError) -> TransactionRecord {
        guard let record = state.transactions[id] else { throw SimulatorError(.notFound, "no transaction '\(id)'") }
        return record
    }

    /// The customers in the same family as `customerId`, not counting them.
    func familyMembers(of customerId: String) -> [String] {
        guard let family = state.customers[customerId]?.familyId else { return [] }
        return state.customers.ids(withKey: .family(family)).filter { $0 != customerId }.sorted()
    }

    // MARK: - Identifiers

    mutating func nextTransactionID() -> String {
        state.counters.transaction += 1
        return String(state.counters.transaction)
    }

    mutating func nextWebOrderLineItemID() -> String {
        state.counters.webOrderLineItem += 1
        return String(state.counters.webOrderLineItem)
    }

    mutating func nextOrderID() -> String {
        state.counters.order += 1
        let digits = String(state.counters.order + 36 * 36 * 36 * 36 * 36 * 36 * 10, radix: 36, uppercase: true)
        return "M" + digits
    }

    /// The customer's app transaction ID for an app, made on first use (one per account per app).
    mutating func appTransactionID(customerId: String, bundleId: String) -> String {
        if let id = state.customers[customerId]?.appTransactionIds[bundleId] { return id }
        state.counters.appTransaction += 1
        let id = String(state.counters.appTransaction)
        state.customers[customerId]?.appTransactionIds[bundleId] = id
        return id
    }

    // MARK: - Signing and notifications

    func sign(_ value: some Encodable) throws(SimulatorError) -> String {
        do {
            return try signer.sign(value)
        } catch {
            throw SimulatorError(.storage, "signing failed: \(error)")
        }
    }

    /// The transaction as Apple would sign it now (or at `signedDate`).
    func signedTransaction(_ id: String, signedDate: Date? = nil) throws(SimulatorError) -> String {
        var info = try transactionRecord(id).info
        info.signedDate = signedDate ?? state.now
        return try sign(info)
    }

    /// The moment a notification is signed: now, but always at least a millisecond after the previous one, so two
    /// notifications about the same purchase never share a `signedDate` even when they happen at the same virtual
    /// instant (at Apple, signing takes time).
    mutating func nextSigningDate() -> Date {
        let date = max(state.now, (state.lastSignedDate ?? .distantPast).addingTimeInterval(0.001))
        state.lastSignedDate = date
        return date
    }

    /// The renewal info of a subscription as of now (or signed at `signedDate`).
    func renewalInfo(for subscription: SubscriptionRecord, signedDate: Date? = nil) -> RenewalInfo {
        var info = RenewalInfo(originalTransactionId: subscription.originalTransactionId)
        info.productId = subscription.productId
        info.autoRenewProductId = subscription.autoRenewProductId
        info.autoRenewStatus = subscription.autoRenewEnabled ? .on : .off
        info.expirationIntent = subscription.expirationIntent
        let retrying = subscription.status == .billingRetry || subscription.status == .billingGracePeriod
        if subscription.status != .active || retrying { info.isInBillingRetryPeriod = retrying }
        info.gracePeriodExpiresDate = subscription.status == .billingGracePeriod ? subscription.gracePeriodExpiresDate : nil
        if let increase = subscription.priceIncrease {
            info.priceIncreaseStatus = increase.accepted || !increase.consentRequired ? .accepted : .pending
        }
        if let pending = subscription.pendingOffer {
            info.offerType = pending.offer.type
            info.offerIdentifier = pending.offer.type == .introductory ? nil : pending.offer.id
            info.offerDiscountType = pending.offer.discountType
            info.offerPeriod = pending.offer.period.rawValue
        }
        info.signedDate = signedDate ?? state.now
        info.environment = state.environment
        info.recentSubscriptionStartDate = subscription.recentSubscriptionStartDate
        info.renewalDate = subscription.expiresDate
        if let customer = state.customers[subscription.customerId], let storefront = Storefront.find(customer.storefront),
            let product = catalog.product(subscription.autoRenewProductId)
        {
            info.currency = storefront.currency
            info.renewalPrice = renewalPrice(product: product, storefront: storefront.countryCode, subscription: subscription)
        }
        info.appAccountToken = subscription.appAccountToken
        info.appTransactionId = state.customers[subscription.customerId]?.appTransactionIds[subscription.bundleId]
        return info
    }

    func renewalPrice(product: Catalog.Product, storefront: String, subscription: SubscriptionRecord) -> Int64? {
        if let pending = subscription.pendingOffer {
            return pending.offer.prices[storefront] ?? 0
        }
        if let increase = subscription.priceIncrease, product.productId == subscription.productId {
            return increase.newPrice
        }
        return product.prices[storefront]
    }

    /// Records a notification about a transaction (and its subscription, for auto-renewables), signed now.
    mutating func notify(
        _ type: NotificationType,
        _ subtype: NotificationSubtype? = nil,
        transactionId: String,
        consumptionRequestReason: ConsumptionRequestReason? = nil
    ) throws(SimulatorError) {
        let record = try transactionRecord(transactionId)
        let subscription = state.subscriptions[record.info.originalTransactionId]
        let signedDate = nextSigningDate()
        let data = NotificationData(
            appAppleId: state.environment == .production ? catalog.app(record.info.bundleId)?.appAppleId : nil,
            bundleId: record.info.bundleId,
            bundleVersion: "1",
            environment: state.environment,
            signedTransactionInfo: try signedTransaction(transactionId, signedDate: signedDate),
            signedRenewalInfo: try subscription.map { (subscription) throws(SimulatorError) in
                try sign(renewalInfo(for: subscription, signedDate: signedDate))
            },
            status: subscription?.status,
            consumptionRequestReason: consumptionRequestReason
        )
        try enqueue(
            NotificationPayload(
                notificationType: type, subtype: subtype, notificationUUID: UUID().uuidString.lowercased(),
                signedDate: signedDate, data: data
            ),
            bundleId: record.info.bundleId, customerId: record.customerId,
            originalTransactionId: record.info.originalTransactionId, transactionId: transactionId
        )
    }

    /// Signs and records a notification payload, due for delivery now.
    mutating func enqueue(
        _ payload: NotificationPayload,
        bundleId: String,
        customerId: String?,
        originalTransactionId: String? = nil,
        transactionId: String? = nil,
        testNotificationToken: String? = nil
    ) throws(SimulatorError) {
        state.notifications.append(
            NotificationRecord(
                notificationUUID: payload.notificationUUID, notificationType: payload.notificationType,
                subtype: payload.subtype, signedPayload: try sign(payload), createdAt: state.now, bundleId: bundleId,
                customerId: customerId, originalTransactionId: originalTransactionId, transactionId: transactionId,
                nextAttemptAt: state.now, testNotificationToken: testNotificationToken
            )
        )
    }

    /// Sends a `TEST` notification for an app; returns its `testNotificationToken`.
    package mutating func requestTestNotification(bundleId: String) throws(SimulatorError) -> String {
        guard let app = catalog.app(bundleId) else { throw SimulatorError(.notFound, "no app '\(bundleId)'") }
        let token = UUID().uuidString.lowercased() + "_" + String(state.now.epochMilliseconds)
        let data = NotificationData(
            appAppleId: state.environment == .production ? app.appAppleId : nil, bundleId: bundleId,
            environment: state.environment
        )
        try enqueue(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString.lowercased(), signedDate: nextSigningDate(), data: data
            ),
            bundleId: bundleId, customerId: nil, testNotificationToken: token
        )
        return token
    }

    /// Notifications due for a delivery attempt now, oldest first.
    package func dueNotifications() -> [NotificationRecord] {
        state.notifications.due(at: state.now)
    }

    /// Records a delivery attempt made at `date` (default: now) and schedules the next one on Apple's schedule: in
    /// production 1, 12, 24, 48 and 72 hours after each failed attempt (6 attempts at most); in sandbox, none.
    package mutating func recordDeliveryAttempt(
        notificationUUID: String,
        result: String,
        at date: Date? = nil
    ) throws(SimulatorError) {
        guard let position = state.notifications.position(of: notificationUUID) else {
            throw SimulatorError(.notFound, "no notification '\(notificationUUID)'")
        }
        let when = date ?? state.now
        var notification = state.notifications[position]
        notification.sendAttempts.append(.init(attemptDate: when, sendAttemptResult: result))
        let attempts = notification.sendAttempts.count
        if result == "SUCCESS" || state.environment != .production || attempts > Self.retryScheduleHours.count {
            notification.nextAttemptAt = nil
        } else {
            notification.nextAttemptAt = when.addingTimeInterval(Self.retryScheduleHours[attempts - 1] * 3600)
        }
        state.notifications.update(at: position, notification)
    }
}
