/// `deliveryStatus` of Send Consumption Information v2.
public struct DeliveryStatus: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let delivered: Self = "DELIVERED"
    public static let undeliveredQualityIssue: Self = "UNDELIVERED_QUALITY_ISSUE"
    public static let undeliveredWrongItem: Self = "UNDELIVERED_WRONG_ITEM"
    public static let undeliveredServerOutage: Self = "UNDELIVERED_SERVER_OUTAGE"
    public static let undeliveredOther: Self = "UNDELIVERED_OTHER"

    public static let knownValues: [Self] = [
        .delivered, .undeliveredQualityIssue, .undeliveredWrongItem, .undeliveredServerOutage, .undeliveredOther,
    ]
}

/// `refundPreference` of Send Consumption Information v2.
public struct RefundPreference: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let decline: Self = "DECLINE"
    public static let grantFull: Self = "GRANT_FULL"
    public static let grantProrated: Self = "GRANT_PRORATED"

    public static let knownValues: [Self] = [.decline, .grantFull, .grantProrated]
}

/// Send Consumption Information (v2, API 1.19) body.
public struct ConsumptionRequest: Codable, Hashable, Sendable {
    /// Must be `true`: send consumption information only when the customer consented.
    public var customerConsented: Bool
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// Milliunits 0-100000; 0 unless delivered; not for auto-renewables; 1-99999 with `GRANT_PRORATED`.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference?

    public init(
        customerConsented: Bool, deliveryStatus: DeliveryStatus, sampleContentProvided: Bool,
        consumptionPercentage: Int? = nil, refundPreference: RefundPreference? = nil
    ) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }
}

/// Send Consumption Information V1 (deprecated) body: integers as APPSTORE-SPEC §1.4 lists them.
public struct ConsumptionRequestV1: Codable, Hashable, Sendable {
    public var customerConsented: Bool
    public var consumptionStatus: Int
    public var platform: Int
    public var sampleContentProvided: Bool
    public var deliveryStatus: Int
    /// A UUID or "".
    public var appAccountToken: String
    public var accountTenure: Int
    public var playTime: Int
    public var lifetimeDollarsRefunded: Int
    public var lifetimeDollarsPurchased: Int
    public var userStatus: Int
    public var refundPreference: Int?

    public init(
        customerConsented: Bool, consumptionStatus: Int, platform: Int, sampleContentProvided: Bool, deliveryStatus: Int,
        appAccountToken: String, accountTenure: Int, playTime: Int, lifetimeDollarsRefunded: Int,
        lifetimeDollarsPurchased: Int, userStatus: Int, refundPreference: Int? = nil
    ) {
        self.customerConsented = customerConsented
        self.consumptionStatus = consumptionStatus
        self.platform = platform
        self.sampleContentProvided = sampleContentProvided
        self.deliveryStatus = deliveryStatus
        self.appAccountToken = appAccountToken
        self.accountTenure = accountTenure
        self.playTime = playTime
        self.lifetimeDollarsRefunded = lifetimeDollarsRefunded
        self.lifetimeDollarsPurchased = lifetimeDollarsPurchased
        self.userStatus = userStatus
        self.refundPreference = refundPreference
    }
}
