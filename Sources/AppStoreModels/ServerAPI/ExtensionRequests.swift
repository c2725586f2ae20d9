public import Foundation

/// `extendReasonCode`: why a renewal date is extended.
public struct ExtendReasonCode: OpenIntegerWireValue {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let undeclared: Self = 0
    public static let customerSatisfaction: Self = 1
    public static let other: Self = 2
    public static let serviceIssueOrOutage: Self = 3

    public static let knownValues: [Self] = [.undeclared, .customerSatisfaction, .other, .serviceIssueOrOutage]
}

/// Extend a Subscription Renewal Date's body.
public struct ExtendRenewalDateRequest: Codable, Hashable, Sendable {
    /// 1-90.
    public var extendByDays: Int
    public var extendReasonCode: ExtendReasonCode
    /// Your own identifier for the request, at most 128 characters.
    public var requestIdentifier: String

    public init(extendByDays: Int, extendReasonCode: ExtendReasonCode, requestIdentifier: String) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
    }
}

/// Extend a Subscription Renewal Date's answer.
public struct ExtendRenewalDateResponse: Codable, Hashable, Sendable {
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var success: Bool?
    /// The new expiry.
    public var effectiveDate: Date?

    public init(originalTransactionId: String? = nil, webOrderLineItemId: String? = nil, success: Bool? = nil, effectiveDate: Date? = nil) {
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.success = success
        self.effectiveDate = effectiveDate
    }
}

/// Extend Subscription Renewal Dates for All Active Subscribers' body.
public struct MassExtendRenewalDateRequest: Codable, Hashable, Sendable {
    /// A UUID string, at most 128 characters; reusing one returns the first request.
    public var requestIdentifier: String
    public var extendByDays: Int
    public var extendReasonCode: ExtendReasonCode
    public var productId: String
    /// ISO 3166-1 alpha-3 codes; `nil` for every storefront (an empty list is an error).
    public var storefrontCountryCodes: [String]?

    public init(
        requestIdentifier: String, extendByDays: Int, extendReasonCode: ExtendReasonCode, productId: String,
        storefrontCountryCodes: [String]? = nil
    ) {
        self.requestIdentifier = requestIdentifier
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.productId = productId
        self.storefrontCountryCodes = storefrontCountryCodes
    }
}

/// The mass extension's answer.
public struct MassExtendRenewalDateResponse: Codable, Hashable, Sendable {
    public var requestIdentifier: String

    public init(requestIdentifier: String) {
        self.requestIdentifier = requestIdentifier
    }
}

/// Get Status of Subscription Renewal Date Extensions.
public struct MassExtendRenewalDateStatusResponse: Codable, Hashable, Sendable {
    public var requestIdentifier: String?
    public var complete: Bool?
    /// Only when complete.
    public var completeDate: Date?
    public var succeededCount: Int64?
    public var failedCount: Int64?

    public init(
        requestIdentifier: String? = nil, complete: Bool? = nil, completeDate: Date? = nil, succeededCount: Int64? = nil, failedCount: Int64? = nil
    ) {
        self.requestIdentifier = requestIdentifier
        self.complete = complete
        self.completeDate = completeDate
        self.succeededCount = succeededCount
        self.failedCount = failedCount
    }
}
