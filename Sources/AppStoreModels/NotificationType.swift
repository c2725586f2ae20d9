/// `notificationType` of an App Store Server Notification V2 (APPSTORE-SPEC §2.3).
public struct NotificationType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let subscribed: Self = "SUBSCRIBED"
    public static let didRenew: Self = "DID_RENEW"
    public static let didChangeRenewalPref: Self = "DID_CHANGE_RENEWAL_PREF"
    public static let didChangeRenewalStatus: Self = "DID_CHANGE_RENEWAL_STATUS"
    public static let offerRedeemed: Self = "OFFER_REDEEMED"
    public static let didFailToRenew: Self = "DID_FAIL_TO_RENEW"
    public static let gracePeriodExpired: Self = "GRACE_PERIOD_EXPIRED"
    public static let expired: Self = "EXPIRED"
    public static let priceIncrease: Self = "PRICE_INCREASE"
    public static let refund: Self = "REFUND"
    public static let refundDeclined: Self = "REFUND_DECLINED"
    public static let refundReversed: Self = "REFUND_REVERSED"
    public static let consumptionRequest: Self = "CONSUMPTION_REQUEST"
    public static let revoke: Self = "REVOKE"
    public static let renewalExtended: Self = "RENEWAL_EXTENDED"
    public static let renewalExtension: Self = "RENEWAL_EXTENSION"
    public static let oneTimeCharge: Self = "ONE_TIME_CHARGE"
    public static let test: Self = "TEST"
    public static let externalPurchaseToken: Self = "EXTERNAL_PURCHASE_TOKEN"
    public static let rescindConsent: Self = "RESCIND_CONSENT"
    public static let metadataUpdate: Self = "METADATA_UPDATE"
    public static let migration: Self = "MIGRATION"
    public static let priceChange: Self = "PRICE_CHANGE"

    public static let knownValues: [Self] = [
        .subscribed, .didRenew, .didChangeRenewalPref, .didChangeRenewalStatus, .offerRedeemed, .didFailToRenew,
        .gracePeriodExpired, .expired, .priceIncrease, .refund, .refundDeclined, .refundReversed,
        .consumptionRequest, .revoke, .renewalExtended, .renewalExtension, .oneTimeCharge, .test,
        .externalPurchaseToken, .rescindConsent, .metadataUpdate, .migration, .priceChange,
    ]
}
