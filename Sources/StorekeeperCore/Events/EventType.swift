/// What an event says happened to a customer. The catalogue is closed: an endpoint's configured `eventTypes` must name
/// these (a typo is refused at load), and a consumer may switch over them; ``customerUpdated`` covers a change of the
/// customer's state that none of the others names.
package enum EventType: String, CaseIterable, Codable, Hashable, Sendable, Comparable {
    /// A subscription the customer did not have before: first purchase of it (trial, offer or paid).
    case subscriptionStarted = "subscription.started"
    /// The subscription renewed for another period (or was bought again after it had expired).
    case subscriptionRenewed = "subscription.renewed"
    /// A renewal failed: the subscription is in billing retry, without a grace period.
    case subscriptionBillingIssue = "subscription.billing_issue"
    /// A renewal failed and the customer keeps access during the billing grace period.
    case subscriptionGracePeriodStarted = "subscription.grace_period_started"
    /// A subscription in billing retry or grace period renewed.
    case subscriptionBillingRecovered = "subscription.billing_recovered"
    /// The subscription's access ended; `changes.reason` says why (`voluntary`, `billing_error`, `price_increase`,
    /// `product_not_for_sale`, `grace_period_ended`, `time`, `unknown`).
    case subscriptionExpired = "subscription.expired"
    /// The customer moved to another product of the group; `changes.direction` is `upgrade`, `downgrade` or
    /// `crossgrade`.
    case subscriptionProductChanged = "subscription.product_changed"
    /// The product the subscription will renew to changed (a downgrade or crossgrade at the next renewal).
    case subscriptionRenewalProductChanged = "subscription.renewal_product_changed"
    case subscriptionAutoRenewDisabled = "subscription.auto_renew_disabled"
    case subscriptionAutoRenewEnabled = "subscription.auto_renew_enabled"
    /// The developer extended the renewal date (Extend a Subscription Renewal Date).
    case subscriptionRenewalExtended = "subscription.renewal_extended"
    /// The customer's consent to a price increase changed; `changes.priceIncreaseStatus` is `pending` or `accepted`.
    case subscriptionPriceIncrease = "subscription.price_increase"
    /// A transaction of the subscription redeemed an offer (`changes.offerType`, `changes.offerIdentifier`).
    case subscriptionOfferRedeemed = "subscription.offer_redeemed"
    /// A subscription's status changed with no other change named above (an `EXPIRED` notification after access had
    /// already ended by time, for example).
    case subscriptionStatusChanged = "subscription.status_changed"
    /// A non-consumable or non-renewing subscription was bought.
    case purchaseCompleted = "purchase.completed"
    /// A non-renewing subscription's term ended.
    case purchaseExpired = "purchase.expired"
    /// Apple refunded a purchase (subscription, non-consumable or non-renewing); access ends.
    case purchaseRefunded = "purchase.refunded"
    /// Apple reversed a refund; access comes back.
    case purchaseRefundReversed = "purchase.refund_reversed"
    /// Family Sharing access ended (the purchaser stopped sharing, or the member left the family).
    case purchaseRevoked = "purchase.revoked"
    /// Units of a consumable were bought.
    case consumableGranted = "consumable.granted"
    /// A consumable purchase was refunded.
    case consumableRefunded = "consumable.refunded"
    /// A purchase moved to this customer from another (`changes.from`) under the `transfer` restore policy.
    case customerTransferredIn = "customer.transferred_in"
    /// A purchase moved from this customer to another (`changes.to`): its access ends here at once.
    case customerTransferredOut = "customer.transferred_out"
    /// The customer's identity was erased (`DELETE /v1/customers/{id}`): their links and tokens are gone, their
    /// earlier events too; the purchases stay in the ledger for accounting, nobody's until submitted again.
    case customerErased = "customer.erased"
    /// Support granted a promotional entitlement (`changes.grantId`, `changes.entitlement`, `changes.expiresDate`):
    /// it counts from now until it expires or is revoked. Not a purchase.
    case promotionalGranted = "promotional.granted"
    /// Support revoked a promotional entitlement before its expiry (`changes.revokedAt`): it ends at once.
    case promotionalRevoked = "promotional.revoked"
    /// A promotional entitlement reached its expiry.
    case promotionalExpired = "promotional.expired"
    /// The customer's state changed in a way no other type names.
    case customerUpdated = "customer.updated"

    package static func < (lhs: EventType, rhs: EventType) -> Bool { lhs.rawValue < rhs.rawValue }
}
