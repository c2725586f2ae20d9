public import Foundation

/// A failed App Store Server API call: what kind of failure, Apple's HTTP status and numeric error code (known or
/// not), the message, and the cause. Messages and descriptions never contain the token or the private key.
public struct AppStoreServerAPIError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The request was refused before sending (bad identifier, out-of-range value, …). Nothing was sent.
        public static let invalidRequest = Kind(rawValue: "invalid-request")
        /// The App Store answered with an error status (and usually an error code).
        public static let apiError = Kind(rawValue: "api-error")
        /// 401: the token was refused (check key ID, issuer ID, bundle ID and the key itself).
        public static let unauthorized = Kind(rawValue: "unauthorized")
        /// No answer: connection failure, reset, or a request timeout.
        public static let transport = Kind(rawValue: "transport")
        /// The total deadline ran out before a successful answer.
        public static let deadlineExceeded = Kind(rawValue: "deadline-exceeded")
        /// The answer was not the JSON expected.
        public static let malformedResponse = Kind(rawValue: "malformed-response")
        /// A signed value in the answer did not verify.
        public static let verification = Kind(rawValue: "verification")
        /// The client is misconfigured (credentials, base URL).
        public static let configuration = Kind(rawValue: "configuration")
    }

    public var kind: Kind
    /// The HTTP status, when the App Store answered.
    public var httpStatus: Int?
    /// Apple's numeric error code (e.g. 4040010), known to this build or not.
    public var errorCode: Int?
    /// What failed, for people.
    public var message: String
    /// How many attempts were made.
    public var attempts: Int
    /// The App Store's `Retry-After`, when it sent one.
    public var retryAfter: Date?
    /// The error that caused this one.
    public var underlying: (any Error & Sendable)?

    public init(
        kind: Kind, message: String, httpStatus: Int? = nil, errorCode: Int? = nil, attempts: Int = 0,
        retryAfter: Date? = nil, underlying: (any Error & Sendable)? = nil
    ) {
        self.kind = kind
        self.message = message
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.attempts = attempts
        self.retryAfter = retryAfter
        self.underlying = underlying
    }

    /// Apple's documented name for the error code, if this build knows it.
    public var errorName: String? { errorCode.flatMap { APIErrorCodes.names[$0] } }

    /// Whether Apple documents this failure as worth retrying: 4040002, 4040004, 4040006, 5000001, 429, a 5xx
    /// without an error code, and transport failures.
    public var isRetryable: Bool {
        switch kind {
        case .transport: return true
        case .apiError:
            if let errorCode { return APIErrorCodes.retryable.contains(errorCode) || errorCode == 4_290_000 }
            return httpStatus == 429 || (httpStatus ?? 0) >= 500
        default: return false
        }
    }

    public var description: String { "\(kind): \(detail)" }

    /// Everything but the kind: status, code and name, message, attempts.
    public var detail: String {
        var parts: [String] = []
        if let httpStatus { parts.append("HTTP \(httpStatus)") }
        if let errorCode { parts.append("\(errorCode)" + (errorName.map { " \($0)" } ?? "")) }
        let attemptsText = attempts > 1 ? " (after \(attempts) attempts)" : ""
        return (parts.isEmpty ? "" : parts.joined(separator: " ") + ": ") + message + attemptsText
    }
}

/// Apple's error codes (APPSTORE-SPEC §1.6).
public enum APIErrorCodes {
    /// Errors Apple says to retry ("Errors to retry").
    public static let retryable: Set<Int> = [4_040_002, 4_040_004, 4_040_006, 5_000_001]

    public static let names: [Int: String] = [
        4_000_000: "GeneralBadRequestError", 4_000_002: "InvalidAppIdentifierError", 4_000_005: "InvalidRequestRevisionError",
        4_000_006: "InvalidTransactionIdError", 4_000_008: "InvalidOriginalTransactionIdError",
        4_000_009: "InvalidExtendByDaysError", 4_000_010: "InvalidExtendReasonCodeError",
        4_000_011: "InvalidRequestIdentifierError", 4_000_012: "StartDateTooFarInPastError",
        4_000_013: "StartDateAfterEndDateError", 4_000_014: "InvalidPaginationTokenError",
        4_000_015: "InvalidStartDateError", 4_000_016: "InvalidEndDateError", 4_000_017: "PaginationTokenExpiredError",
        4_000_018: "InvalidNotificationTypeError", 4_000_019: "MultipleFiltersSuppliedError",
        4_000_020: "InvalidTestNotificationTokenError", 4_000_021: "InvalidSortError", 4_000_022: "InvalidProductTypeError",
        4_000_023: "InvalidProductIdError", 4_000_024: "InvalidSubscriptionGroupIdentifierError",
        4_000_025: "InvalidExcludeRevokedError", 4_000_026: "InvalidInAppOwnershipTypeError",
        4_000_027: "InvalidEmptyStorefrontCountryCodeListError", 4_000_028: "InvalidStorefrontCountryCodeError",
        4_000_030: "InvalidRevokedError", 4_000_031: "InvalidStatusError", 4_000_032: "InvalidAccountTenureError",
        4_000_033: "InvalidAppAccountTokenError", 4_000_034: "InvalidConsumptionStatusError",
        4_000_035: "InvalidCustomerConsentedError", 4_000_036: "InvalidDeliveryStatusError",
        4_000_037: "InvalidLifetimeDollarsPurchasedError", 4_000_038: "InvalidLifetimeDollarsRefundedError",
        4_000_039: "InvalidPlatformError", 4_000_040: "InvalidPlayTimeError", 4_000_041: "InvalidSampleContentProvidedError",
        4_000_042: "InvalidUserStatusError", 4_000_043: "InvalidTransactionNotConsumableError",
        4_000_044: "InvalidRefundPreferenceError", 4_000_047: "InvalidTransactionTypeNotSupportedError",
        4_000_048: "AppTransactionIdNotSupportedError", 4_000_183: "InvalidAppAccountTokenUUIDError",
        4_000_185: "FamilyTransactionNotSupportedError", 4_000_187: "TransactionIdIsNotOriginalTransactionIdError",
        4_000_209: "ConsumptionPercentageAutoRenewableSubscriptionError",
        4_030_004: "SubscriptionExtensionIneligibleError", 4_030_005: "SubscriptionMaxExtensionError",
        4_030_007: "FamilySharedSubscriptionExtensionIneligibleError", 4_040_001: "AccountNotFoundError",
        4_040_002: "AccountNotFoundRetryableError", 4_040_003: "AppNotFoundError", 4_040_004: "AppNotFoundRetryableError",
        4_040_005: "OriginalTransactionIdNotFoundError", 4_040_006: "OriginalTransactionIdNotFoundRetryableError",
        4_040_007: "ServerNotificationURLNotFoundError", 4_040_008: "TestNotificationNotFoundError",
        4_040_009: "StatusRequestNotFoundError", 4_040_010: "TransactionIdNotFoundError",
        4_040_019: "AppTransactionDoesNotExistError", 4_290_000: "RateLimitExceededError",
        5_000_000: "GeneralInternalError", 5_000_001: "GeneralInternalRetryableError",
    ]
}
