/// An App Store Server API error code (APPSTORE-SPEC §1.6): the number, Apple's name for it, its documented message,
/// and whether Apple says to retry it. The one list the client (to name and retry what Apple answers) and the
/// simulator (to answer as Apple does) share.
public struct APIErrorCode: Hashable, Sendable, CustomStringConvertible {
    public var code: Int
    /// Apple's name, e.g. `InvalidTransactionIdError`.
    public var name: String
    /// The message Apple's documentation gives.
    public var message: String

    public init(_ code: Int, _ name: String, _ message: String) {
        self.code = code
        self.name = name
        self.message = message
    }

    /// The HTTP status: the code's first three digits.
    public var httpStatus: Int { code / 10_000 }

    /// Whether Apple documents the error as worth retrying ("Errors to retry"), or it is the rate limit.
    public var isRetryable: Bool { Self.retryable.contains(code) || code == Self.rateLimitExceeded.code }

    public var description: String { "\(code) \(name)" }

    /// The errors Apple says to retry.
    public static let retryable: Set<Int> = [4_040_002, 4_040_004, 4_040_006, 5_000_001]

    /// The code with this number, if this build knows it.
    public static func named(_ code: Int) -> APIErrorCode? { byCode[code] }

    private static let byCode: [Int: APIErrorCode] = Dictionary(all.map { ($0.code, $0) }) { first, _ in first }

    public static let generalBadRequest = APIErrorCode(4_000_000, "GeneralBadRequestError", "Bad request.")
    public static let invalidAppIdentifier = APIErrorCode(4_000_002, "InvalidAppIdentifierError", "Invalid request app identifier.")
    public static let invalidRequestRevision = APIErrorCode(4_000_005, "InvalidRequestRevisionError", "Invalid request revision.")
    public static let invalidTransactionId = APIErrorCode(4_000_006, "InvalidTransactionIdError", "Invalid transaction id.")
    public static let invalidOriginalTransactionId = APIErrorCode(4_000_008, "InvalidOriginalTransactionIdError", "Invalid original transaction id.")
    public static let invalidExtendByDays = APIErrorCode(4_000_009, "InvalidExtendByDaysError", "Invalid extend by days value.")
    public static let invalidExtendReasonCode = APIErrorCode(4_000_010, "InvalidExtendReasonCodeError", "Invalid extend reason code.")
    public static let invalidRequestIdentifier = APIErrorCode(4_000_011, "InvalidRequestIdentifierError", "Invalid request identifier.")
    public static let startDateTooFarInPast = APIErrorCode(
        4_000_012, "StartDateTooFarInPastError", "Invalid request. The start date is earlier than the allowed start date.")
    public static let startDateAfterEndDate = APIErrorCode(
        4_000_013, "StartDateAfterEndDateError", "Invalid request. The end date precedes the start date or the dates are the same.")
    public static let invalidPaginationToken = APIErrorCode(
        4_000_014, "InvalidPaginationTokenError", "Invalid request. The pagination token is invalid.")
    public static let invalidStartDate = APIErrorCode(
        4_000_015, "InvalidStartDateError", "Invalid request. The start date is not a timestamp value represented in milliseconds.")
    public static let invalidEndDate = APIErrorCode(
        4_000_016, "InvalidEndDateError", "Invalid request. The end date is not a timestamp value represented in milliseconds.")
    public static let paginationTokenExpired = APIErrorCode(
        4_000_017, "PaginationTokenExpiredError", "Invalid request. The pagination token is expired.")
    public static let invalidNotificationType = APIErrorCode(
        4_000_018, "InvalidNotificationTypeError", "Invalid request. The notification type or subtype is invalid.")
    public static let multipleFiltersSupplied = APIErrorCode(
        4_000_019, "MultipleFiltersSuppliedError", "Invalid request. Supply either a transaction id or a notification type, but not both.")
    public static let invalidTestNotificationToken = APIErrorCode(
        4_000_020, "InvalidTestNotificationTokenError", "Invalid request. The test notification token is invalid.")
    public static let invalidSort = APIErrorCode(4_000_021, "InvalidSortError", "Invalid request. The sort parameter is invalid.")
    public static let invalidProductType = APIErrorCode(
        4_000_022, "InvalidProductTypeError", "Invalid request. The product type parameter is invalid.")
    public static let invalidProductId = APIErrorCode(4_000_023, "InvalidProductIdError", "Invalid request. The product id parameter is invalid.")
    public static let invalidSubscriptionGroupIdentifier = APIErrorCode(
        4_000_024, "InvalidSubscriptionGroupIdentifierError", "Invalid request. The subscription group identifier parameter is invalid.")
    public static let invalidExcludeRevoked = APIErrorCode(
        4_000_025, "InvalidExcludeRevokedError", "Invalid request. The exclude revoked parameter is invalid.")
    public static let invalidInAppOwnershipType = APIErrorCode(
        4_000_026, "InvalidInAppOwnershipTypeError", "Invalid request. The in-app ownership type parameter is invalid.")
    public static let invalidEmptyStorefrontCountryCodeList = APIErrorCode(
        4_000_027, "InvalidEmptyStorefrontCountryCodeListError",
        "Invalid request. If provided, the list of storefront country codes must not be empty.")
    public static let invalidStorefrontCountryCode = APIErrorCode(
        4_000_028, "InvalidStorefrontCountryCodeError", "Invalid request. A storefront country code was invalid.")
    public static let invalidRevoked = APIErrorCode(4_000_030, "InvalidRevokedError", "Invalid request. The revoked parameter is invalid.")
    public static let invalidStatus = APIErrorCode(4_000_031, "InvalidStatusError", "Invalid request. The status parameter is invalid.")
    public static let invalidAccountTenure = APIErrorCode(
        4_000_032, "InvalidAccountTenureError", "Invalid request. The account tenure field is invalid.")
    public static let invalidAppAccountToken = APIErrorCode(
        4_000_033, "InvalidAppAccountTokenError", "Invalid request. The app account token field must contain a valid UUID or an empty string.")
    public static let invalidConsumptionStatus = APIErrorCode(
        4_000_034, "InvalidConsumptionStatusError", "Invalid request. The consumption status field is invalid.")
    public static let invalidCustomerConsented = APIErrorCode(
        4_000_035, "InvalidCustomerConsentedError",
        "Invalid request. The customer consented field is required and must indicate the customer consented")
    public static let invalidDeliveryStatus = APIErrorCode(
        4_000_036, "InvalidDeliveryStatusError", "Invalid request. The delivery status field is invalid")
    public static let invalidLifetimeDollarsPurchased = APIErrorCode(
        4_000_037, "InvalidLifetimeDollarsPurchasedError", "Invalid request. The lifetime dollars purchased field is invalid")
    public static let invalidLifetimeDollarsRefunded = APIErrorCode(
        4_000_038, "InvalidLifetimeDollarsRefundedError", "Invalid request. The lifetime dollars refunded field is invalid")
    public static let invalidPlatform = APIErrorCode(4_000_039, "InvalidPlatformError", "Invalid request. The platform field is invalid")
    public static let invalidPlayTime = APIErrorCode(4_000_040, "InvalidPlayTimeError", "Invalid request. The playtime field is invalid")
    public static let invalidSampleContentProvided = APIErrorCode(
        4_000_041, "InvalidSampleContentProvidedError", "Invalid request. The sample content provided field is invalid")
    public static let invalidUserStatus = APIErrorCode(4_000_042, "InvalidUserStatusError", "Invalid request. The user status field is invalid")
    public static let invalidTransactionNotConsumable = APIErrorCode(
        4_000_043, "InvalidTransactionNotConsumableError",
        "Invalid request. The transaction id parameter must represent a consumable in-app purchase.")
    public static let invalidRefundPreference = APIErrorCode(
        4_000_044, "InvalidRefundPreferenceError", "Invalid request. The refund preference field is invalid.")
    public static let invalidTransactionTypeNotSupported = APIErrorCode(
        4_000_047, "InvalidTransactionTypeNotSupportedError",
        "Invalid request. The transaction id doesn't represent a supported in-app purchase type.")
    public static let appTransactionIdNotSupported = APIErrorCode(
        4_000_048, "AppTransactionIdNotSupportedError", "Invalid request. App transactions aren't supported by this endpoint.")
    public static let invalidAppAccountTokenUUID = APIErrorCode(
        4_000_183, "InvalidAppAccountTokenUUIDError", "Invalid request. The app account token field must be a valid UUID.")
    public static let familyTransactionNotSupported = APIErrorCode(
        4_000_185, "FamilyTransactionNotSupportedError", "Invalid request. Family Sharing transactions aren't supported by this endpoint.")
    public static let transactionIdIsNotOriginalTransactionId = APIErrorCode(
        4_000_187, "TransactionIdIsNotOriginalTransactionIdError", "Invalid request. The transaction ID provided is not an original transaction ID.")
    public static let consumptionPercentageAutoRenewable = APIErrorCode(
        4_000_209, "ConsumptionPercentageAutoRenewableSubscriptionError",
        "Invalid request. The consumption percentage field is not supported for auto-renewable subscription transactions.")
    public static let subscriptionExtensionIneligible = APIErrorCode(
        4_030_004, "SubscriptionExtensionIneligibleError", "Forbidden - subscription state ineligible for extension.")
    public static let subscriptionMaxExtension = APIErrorCode(
        4_030_005, "SubscriptionMaxExtensionError", "Forbidden - subscription has reached maximum extension count.")
    public static let familySharedSubscriptionExtensionIneligible = APIErrorCode(
        4_030_007, "FamilySharedSubscriptionExtensionIneligibleError",
        "Subscriptions that users obtain through Family Sharing can't get a renewal date extension directly.")
    public static let accountNotFound = APIErrorCode(4_040_001, "AccountNotFoundError", "Account not found.")
    public static let accountNotFoundRetryable = APIErrorCode(4_040_002, "AccountNotFoundRetryableError", "Account not found. Please try again.")
    public static let appNotFound = APIErrorCode(4_040_003, "AppNotFoundError", "App not found.")
    public static let appNotFoundRetryable = APIErrorCode(4_040_004, "AppNotFoundRetryableError", "App not found. Please try again.")
    public static let originalTransactionIdNotFound = APIErrorCode(
        4_040_005, "OriginalTransactionIdNotFoundError", "Original transaction id not found.")
    public static let originalTransactionIdNotFoundRetryable = APIErrorCode(
        4_040_006, "OriginalTransactionIdNotFoundRetryableError", "Original transaction id not found. Please try again.")
    public static let serverNotificationURLNotFound = APIErrorCode(
        4_040_007, "ServerNotificationURLNotFoundError",
        "No App Store Server Notification URL found for provided app. Check that a URL is configured in App Store Connect for this environment.")
    public static let testNotificationNotFound = APIErrorCode(
        4_040_008, "TestNotificationNotFoundError",
        "Either the test notification token is expired or the notification and status are not yet available.")
    public static let statusRequestNotFound = APIErrorCode(
        4_040_009, "StatusRequestNotFoundError",
        "The server didn't find a subscription-renewal-date extension request for this requestIdentifier and productId combination.")
    public static let transactionIdNotFound = APIErrorCode(4_040_010, "TransactionIdNotFoundError", "Transaction id not found.")
    public static let appTransactionDoesNotExist = APIErrorCode(
        4_040_019, "AppTransactionDoesNotExistError", "No AppTransaction exists for the customer.")
    public static let rateLimitExceeded = APIErrorCode(4_290_000, "RateLimitExceededError", "Rate limit exceeded.")
    public static let generalInternal = APIErrorCode(5_000_000, "GeneralInternalError", "An unknown error occurred.")
    public static let generalInternalRetryable = APIErrorCode(
        5_000_001, "GeneralInternalRetryableError", "An unknown error occurred. Please try again.")

    /// Every code this build knows.
    public static let all: [APIErrorCode] = [
        .generalBadRequest, .invalidAppIdentifier, .invalidRequestRevision, .invalidTransactionId, .invalidOriginalTransactionId,
        .invalidExtendByDays, .invalidExtendReasonCode, .invalidRequestIdentifier, .startDateTooFarInPast, .startDateAfterEndDate,
        .invalidPaginationToken, .invalidStartDate, .invalidEndDate, .paginationTokenExpired, .invalidNotificationType, .multipleFiltersSupplied,
        .invalidTestNotificationToken, .invalidSort, .invalidProductType, .invalidProductId, .invalidSubscriptionGroupIdentifier,
        .invalidExcludeRevoked, .invalidInAppOwnershipType, .invalidEmptyStorefrontCountryCodeList, .invalidStorefrontCountryCode, .invalidRevoked,
        .invalidStatus, .invalidAccountTenure, .invalidAppAccountToken, .invalidConsumptionStatus, .invalidCustomerConsented, .invalidDeliveryStatus,
        .invalidLifetimeDollarsPurchased, .invalidLifetimeDollarsRefunded, .invalidPlatform, .invalidPlayTime, .invalidSampleContentProvided,
        .invalidUserStatus, .invalidTransactionNotConsumable, .invalidRefundPreference, .invalidTransactionTypeNotSupported,
        .appTransactionIdNotSupported, .invalidAppAccountTokenUUID, .familyTransactionNotSupported, .transactionIdIsNotOriginalTransactionId,
        .consumptionPercentageAutoRenewable, .subscriptionExtensionIneligible, .subscriptionMaxExtension,
        .familySharedSubscriptionExtensionIneligible, .accountNotFound, .accountNotFoundRetryable, .appNotFound, .appNotFoundRetryable,
        .originalTransactionIdNotFound, .originalTransactionIdNotFoundRetryable, .serverNotificationURLNotFound, .testNotificationNotFound,
        .statusRequestNotFound, .transactionIdNotFound, .appTransactionDoesNotExist, .rateLimitExceeded, .generalInternal, .generalInternalRetryable,
    ]
}
