package import AppStoreModels
import Foundation

extension LifecycleEngine {
    /// A purchase as a StoreKit 2 app makes it.
    package struct PurchaseRequest: Codable, Hashable, Sendable {
        package var customerId: String
        package var productId: String
        /// Consumables only; 1 to 10.
        package var quantity: Int
        /// The UUID the app passes to StoreKit to link the purchase to its user.
        package var appAccountToken: LowercaseUUID?
        /// An offer from the product's catalog entry: introductory, promotional, offer code or win-back.
        package var offerId: String?
        /// The developer's signature of a promotional or win-back offer (checked when the engine has an offer key).
        package var offerSignature: OfferSignatureRequest?
        /// The developer's `introductory-offer-eligibility` JWS, which overrides the App Store's own judgement.
        package var introductoryOfferEligibility: String?

        package init(
            customerId: String, productId: String, quantity: Int = 1, appAccountToken: LowercaseUUID? = nil,
            offerId: String? = nil
        ) {
            self.customerId = customerId
            self.productId = productId
            self.quantity = quantity
            self.appAccountToken = appAccountToken
            self.offerId = offerId
        }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            customerId = try container.decode(String.self, forKey: .customerId)
            productId = try container.decode(String.self, forKey: .productId)
            quantity = try container.decodeIfPresent(Int.self, forKey: .quantity) ?? 1
            appAccountToken = try container.decodeIfPresent(LowercaseUUID.self, forKey: .appAccountToken)
            offerId = try container.decodeIfPresent(String.self, forKey: .offerId)
            offerSignature = try container.decodeIfPresent(OfferSignatureRequest.self, forKey: .offerSignature)
            introductoryOfferEligibility = try container.decodeIfPresent(String.self, forKey: .introductoryOfferEligibility)
        }
    }

    /// What the app gets back from StoreKit 2.
    package struct PurchaseResult: Codable, Hashable, Sendable {
        /// The JWS a StoreKit 2 app receives (`Transaction.jwsRepresentation`).
        package var signedTransaction: String
        package var transactionId: String
        package var originalTransactionId: String
        /// What happened: `purchased`, `upgraded`, `downgrade-scheduled`, `downgrade-cancelled`, `offer-redeemed`.
        package var outcome: String
    }

    /// Buys a product. Auto-renewables follow the subscription-group rules: a first purchase subscribes, a purchase
    /// after expiry resubscribes, a higher level (or same-duration crossgrade) upgrades at once, a lower level
    /// (or different-duration crossgrade) is scheduled for the next renewal, and buying the current product again
    /// cancels a scheduled change. Family-shareable products are shared with the purchaser's family.
    package mutating func purchase(_ request: PurchaseRequest) throws(SimulatorError) -> PurchaseResult {
        try transaction { (engine) throws(SimulatorError) in try engine.applyPurchase(request) }
    }

    private mutating func applyPurchase(_ request: PurchaseRequest) throws(SimulatorError) -> PurchaseResult {
        let customer = try customer(request.customerId)
        let product = try product(request.productId)
        guard !state.removedFromSale.contains(product.productId) else {
            throw SimulatorError(.conflict, "product '\(product.productId)' is no longer for sale")
        }
        guard product.prices[customer.storefront] != nil else {
            throw SimulatorError(.conflict, "product '\(product.productId)' has no price in storefront \(customer.storefront)")
        }
        guard (1...10).contains(request.quantity), request.quantity == 1 || product.type == .consumable else {
            throw SimulatorError(.invalidRequest, "quantity must be 1, or 1-10 for consumables; got \(request.quantity)")
        }
        let offer = try request.offerId.map { (id) throws(SimulatorError) -> Catalog.Offer in
            guard let offer = product.offers.first(where: { $0.id == id }) else {
                throw SimulatorError(.notFound, "product '\(product.productId)' has no offer '\(id)'")
            }
            return offer
        }
        if let key = offerKey {
            if let offer, offer.type == .promotional || offer.type == .winBack {
                try checkOfferSignature(request, product: product, offer: offer, key: key)
            }
            if let jws = request.introductoryOfferEligibility, offer?.type == .introductory,
                try !introductoryEligibility(jws, product: product, key: key)
            {
                throw SimulatorError(.conflict, "the developer's introductory-offer-eligibility signature says this customer may not have the offer")
            }
        }
        if product.type == .autoRenewable {
            return try purchaseSubscription(product, customer: customer, request: request, offer: offer)
        }
        return try purchaseOneTime(product, customer: customer, request: request, offer: offer)
    }

    // MARK: One-time products

    private mutating func purchaseOneTime(
        _ product: Catalog.Product,
        customer: Customer,
        request: PurchaseRequest,
        offer: Catalog.Offer?
    ) throws(SimulatorError) -> PurchaseResult {
        if product.type == .nonConsumable, let owned = ownedNonConsumable(customer.id, product.productId) {
            // StoreKit restores instead of charging twice.
            throw SimulatorError(.conflict, "customer '\(customer.id)' already owns '\(product.productId)' (transaction \(owned))")
        }
        let id = makeTransaction(
            customer: customer, product: product, reason: .purchase, quantity: request.quantity,
            appAccountToken: request.appAccountToken, offer: offer
        )
        try notify(.oneTimeCharge, transactionId: id)
        if product.type == .nonConsumable && product.familyShareable {
            for member in familyMembers(of: customer.id) where ownedNonConsumable(member, product.productId) == nil {
                let copy = try shareCopy(of: id, with: member)
                try notify(.oneTimeCharge, transactionId: copy)
            }
        }
        return PurchaseResult(
            signedTransaction: try signedTransaction(id), transactionId: id, originalTransactionId: id, outcome: "purchased"
        )
    }

    /// The customer's unrevoked transaction for a non-consumable, if any.
    func ownedNonConsumable(_ customerId: String, _ productId: String) -> String? {
        state.transactions.records(of: customerId).first {
            $0.info.productId == productId && $0.info.revocationDate == nil
        }?.info.transactionId
    }

    // MARK: Subscriptions

    private mutating func purchaseSubscription(
        _ product: Catalog.Product,
        customer: Customer,
        request: PurchaseRequest,
        offer: Catalog.Offer?
    ) throws(SimulatorError) -> PurchaseResult {
        let groupId = product.subscriptionGroupId!
        let existing = state.subscriptions.records(of: customer.id).first {
            $0.groupId == groupId && $0.ownership == .purchased
        }
        // A developer's signed "allowed" replaces the App Store's own judgement of an introductory offer.
        let developerAllowsIntroductory = request.introductoryOfferEligibility != nil && offerKey != nil
        if let offer, !(offer.type == .introductory && developerAllowsIntroductory) {
            try checkEligibility(offer, product: product, existing: existing)
        }
        guard let existing else {
            return try subscribe(product, customer: customer, request: request, offer: offer, resubscribing: nil)
        }
        guard existing.hasService || existing.status == .billingRetry else {
            return try subscribe(product, customer: customer, request: request, offer: offer, resubscribing: existing)
        }
        if let offer, offer.type != .introductory {
            return try redeemOnActive(existing, product: product, offer: offer)
        }
        return try changePlan(existing, to: product, request: request)
    }

    private func checkEligibility(
        _ offer: Catalog.Offer,
        product: Catalog.Product,
        existing: SubscriptionRecord?
    ) throws(SimulatorError) {
        switch offer.type {
        case .introductory where existing != nil:
            throw SimulatorError(.conflict, "introductory offers are for customers new to the subscription group")
        case .winBack where existing == nil || existing!.hasService || existing!.status == .billingRetry:
            throw SimulatorError(.conflict, "win-back offers are for lapsed subscribers only")
        default:
            break
        }
    }

    /// A first subscription in the group, or a resubscription after expiry (same original transaction ID).
    private mutating func subscribe(
        _ product: Catalog.Product,
        customer: Customer,
        request: PurchaseRequest,
        offer: Catalog.Offer?,
        resubscribing previous: SubscriptionRecord?
    ) throws(SimulatorError) -> PurchaseResult {
        let now = state.now
        let originalId = previous?.originalTransactionId
        let id = makeTransaction(
            customer: customer, product: product, reason: .purchase, originalTransactionId: originalId,
            appAccountToken: request.appAccountToken ?? previous?.appAccountToken, offer: offer
        )
        let expires = state.transactions[id]!.info.expiresDate!
        let gapAllowed: TimeInterval = state.environment == .sandbox ? 10 * 60 : 60 * 86_400  // APPSTORE-SPEC §3.3
        var subscription = SubscriptionRecord(
            originalTransactionId: originalId ?? id, customerId: customer.id, bundleId: product.bundleId,
            groupId: product.subscriptionGroupId!, productId: product.productId, autoRenewProductId: product.productId,
            expiresDate: expires, latestTransactionId: id,
            recentSubscriptionStartDate: previous.map {
                now.timeIntervalSince($0.expiresDate) <= gapAllowed ? $0.recentSubscriptionStartDate : now
            } ?? now
        )
        subscription.appAccountToken = request.appAccountToken ?? previous?.appAccountToken
        subscription.familyCopies = previous?.familyCopies ?? [:]
        subscription.extensionDates = previous?.extensionDates ?? []
        subscription.paidPeriods = (previous?.paidPeriods ?? 0) + (state.transactions[id]!.info.price ?? 0 > 0 ? 1 : 0)
        if let offer, offer.periodCount > 1 {
            subscription.pendingOffer = .init(offer: offer, remainingPeriods: offer.periodCount - 1)
        }
        state.subscriptions[subscription.originalTransactionId] = subscription
        try notify(.subscribed, previous == nil ? .initialBuy : .resubscribe, transactionId: id)
        if product.familyShareable {
            for member in familyMembers(of: customer.id) {
                try shareSubscription(subscription.originalTransactionId, with: member)
            }
        }
        return PurchaseResult(
            signedTransaction: try signedTransaction(id), transactionId: id,
            originalTransactionId: subscription.originalTransactionId, outcome: "purchased"
        )
    }

    /// A promotional, offer-code or win-back offer on an active subscription: it applies from the next renewal.
    private mutating func redeemOnActive(
        _ subscription: SubscriptionRecord,
        product: Catalog.Product,
        offer: Catalog.Offer
    ) throws(SimulatorError) -> PurchaseResult {
        var updated = subscription
        let current = try self.product(subscription.productId)
        updated.pendingOffer = .init(offer: offer, remainingPeriods: offer.periodCount)
        var subtype: NotificationSubtype? = nil
        if product.productId != subscription.productId {
            subtype = (product.level ?? 0) < (current.level ?? 0) ? .upgrade : .downgrade
            updated.autoRenewProductId = product.productId
        }
        state.subscriptions[subscription.originalTransactionId] = updated
        try notify(.offerRedeemed, subtype, transactionId: subscription.latestTransactionId)
        return PurchaseResult(
            signedTransaction: try signedTransaction(subscription.latestTransactionId),
            transactionId: subscription.latestTransactionId, originalTransactionId: subscription.originalTransactionId,
            outcome: "offer-redeemed"
        )
    }

    /// Upgrade, downgrade, crossgrade or revert within an active subscription.
    private mutating func changePlan(
        _ subscription: SubscriptionRecord,
        to product: Catalog.Product,
        request: PurchaseRequest
    ) throws(SimulatorError) -> PurchaseResult {
        let current = try self.product(subscription.productId)
        var updated = subscription
        if product.productId == subscription.productId {
            guard subscription.autoRenewProductId != subscription.productId else {
                throw SimulatorError(.conflict, "customer '\(subscription.customerId)' is already subscribed to '\(product.productId)'")
            }
            updated.autoRenewProductId = product.productId
            updated.autoRenewEnabled = true
            state.subscriptions[subscription.originalTransactionId] = updated
            try notify(.didChangeRenewalPref, transactionId: subscription.latestTransactionId)
            return try result(for: updated, outcome: "downgrade-cancelled")
        }
        let higher = product.level! < current.level!
        let sameDuration = product.period == current.period
        let immediate = higher || (product.level == current.level && sameDuration)
        guard immediate else {
            updated.autoRenewProductId = product.productId
            updated.autoRenewEnabled = true
            state.subscriptions[subscription.originalTransactionId] = updated
            try notify(.didChangeRenewalPref, .downgrade, transactionId: subscription.latestTransactionId)
            return try result(for: updated, outcome: "downgrade-scheduled")
        }
        // Upgrade: the old transaction is marked upgraded; a new period starts now on the new product.
        state.transactions[subscription.latestTransactionId]?.info.isUpgraded = true
        let modifiedAt = state.now
        state.transactions[subscription.latestTransactionId]?.modifiedAt = modifiedAt
        let customer = try customer(subscription.customerId)
        let id = makeTransaction(
            customer: customer, product: product, reason: .purchase,
            originalTransactionId: subscription.originalTransactionId,
            appAccountToken: request.appAccountToken ?? subscription.appAccountToken, offer: nil
        )
        updated.beginPeriod(with: state.transactions[id]!.info)
        updated.autoRenewProductId = product.productId
        updated.autoRenewEnabled = true
        updated.pendingOffer = nil
        updated.priceIncrease = nil
        state.subscriptions[subscription.originalTransactionId] = updated
        try notify(.didChangeRenewalPref, .upgrade, transactionId: id)
        try followPurchaser(updated.originalTransactionId, notification: .didChangeRenewalPref, subtype: .upgrade, newTransaction: true)
        return try result(for: updated, outcome: "upgraded")
    }

    private func result(for subscription: SubscriptionRecord, outcome: String) throws(SimulatorError) -> PurchaseResult {
        PurchaseResult(
            signedTransaction: try signedTransaction(subscription.latestTransactionId),
            transactionId: subscription.latestTransactionId,
            originalTransactionId: subscription.originalTransactionId, outcome: outcome
        )
    }

    // MARK: Transactions

    /// Creates a transaction at the current time; subscriptions get their period's expiry (the offer's, if any).
    mutating func makeTransaction(
        customer: Customer,
        product: Catalog.Product,
        reason: TransactionReason,
        originalTransactionId: String? = nil,
        quantity: Int = 1,
        appAccountToken: LowercaseUUID?,
        offer: Catalog.Offer?,
        purchaseDate: Date? = nil
    ) -> String {
        let id = nextTransactionID()
        let storefront = Storefront.find(customer.storefront)!
        let date = purchaseDate ?? state.now
        var info = TransactionInfo(
            transactionId: id, originalTransactionId: originalTransactionId ?? id, bundleId: product.bundleId,
            productId: product.productId, purchaseDate: date, type: product.type
        )
        info.originalPurchaseDate = originalTransactionId.flatMap { state.transactions[$0]?.info.purchaseDate } ?? date
        info.quantity = quantity
        info.appAccountToken = appAccountToken
        info.inAppOwnershipType = .purchased
        info.environment = state.environment
        info.storefront = storefront.countryCode
        info.storefrontId = storefront.id
        info.transactionReason = reason
        info.currency = storefront.currency
        info.price =
            (offer.map { $0.prices[storefront.countryCode] ?? 0 } ?? product.prices[storefront.countryCode] ?? 0)
            * Int64(quantity)
        info.appTransactionId = appTransactionID(customerId: customer.id, bundleId: product.bundleId)
        if let offer {
            info.offerType = offer.type
            info.offerIdentifier = offer.type == .introductory ? nil : offer.id
            info.offerDiscountType = offer.discountType
            info.offerPeriod = offer.period.rawValue
        }
        if product.type == .autoRenewable, let period = product.period {
            info.subscriptionGroupIdentifier = product.subscriptionGroupId
            info.webOrderLineItemId = nextWebOrderLineItemID()
            info.expiresDate =
                offer.map { state.renewalRate.end(of: $0.period, from: date) }
                ?? state.renewalRate.end(of: period, from: date)
        }
        state.transactions[id] = TransactionRecord(
            info: info, customerId: customer.id, orderId: nextOrderID(), modifiedAt: state.now
        )
        return id
    }
}
