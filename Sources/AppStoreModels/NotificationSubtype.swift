/// `subtype` of an App Store Server Notification V2 (APPSTORE-SPEC §2.3).
public struct NotificationSubtype: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let initialBuy: Self = "INITIAL_BUY"
    public static let resubscribe: Self = "RESUBSCRIBE"
    public static let downgrade: Self = "DOWNGRADE"
    public static let upgrade: Self = "UPGRADE"
    public static let autoRenewEnabled: Self = "AUTO_RENEW_ENABLED"
    public static let autoRenewDisabled: Self = "AUTO_RENEW_DISABLED"
    public static let voluntary: Self = "VOLUNTARY"
    public static let billingRetry: Self = "BILLING_RETRY"
    public static let priceIncrease: Self = "PRICE_INCREASE"
    public static let gracePeriod: Self = "GRACE_PERIOD"
    public static let pending: Self = "PENDING"
    public static let accepted: Self = "ACCEPTED"
    public static let billingRecovery: Self = "BILLING_RECOVERY"
    public static let productNotForSale: Self = "PRODUCT_NOT_FOR_SALE"
    public static let summary: Self = "SUMMARY"
    public static let failure: Self = "FAILURE"
    public static let unreported: Self = "UNREPORTED"
    public static let created: Self = "CREATED"
    public static let activeTokenReminder: Self = "ACTIVE_TOKEN_REMINDER"

    public static let knownValues: [Self] = [
        .initialBuy, .resubscribe, .downgrade, .upgrade, .autoRenewEnabled, .autoRenewDisabled, .voluntary,
        .billingRetry, .priceIncrease, .gracePeriod, .pending, .accepted, .billingRecovery, .productNotForSale,
        .summary, .failure, .unreported, .created, .activeTokenReminder,
    ]
}
