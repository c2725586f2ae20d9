import Foundation
public import Hummingbird

/// An App Store Server API error as Apple answers it: the HTTP status is the code's first three digits and the
/// body is `{"errorCode": …, "errorMessage": …}`.
public struct AppStoreAPIError: Error, Hashable, Sendable {
    public var errorCode: Int
    public var errorMessage: String
    /// `Retry-After` on 429: a UNIX time in milliseconds, as Apple documents it.
    public var retryAfter: String?

    public init(_ errorCode: Int, _ errorMessage: String) {
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }

    public var status: HTTPResponse.Status { .init(code: errorCode / 10_000) }

    public static let generalBadRequest = AppStoreAPIError(4_000_000, "Bad request.")
    public static let invalidAppIdentifier = AppStoreAPIError(4_000_002, "Invalid request app identifier.")
    public static let invalidRequestRevision = AppStoreAPIError(4_000_005, "Invalid request revision.")
    public static let invalidTransactionId = AppStoreAPIError(4_000_006, "Invalid transaction id.")
    public static let invalidOriginalTransactionId = AppStoreAPIError(4_000_008, "Invalid original transaction id.")
    public static let invalidExtendByDays = AppStoreAPIError(4_000_009, "Invalid extend by days value.")
    public static let invalidExtendReasonCode = AppStoreAPIError(4_000_010, "Invalid extend reason code.")
    public static let invalidRequestIdentifier = AppStoreAPIError(4_000_011, "Invalid request identifier.")
    public static let startDateTooFarInPast = AppStoreAPIError(4_000_012, "Invalid request. The start date is earlier than the allowed start date.")
    public static let startDateAfterEndDate = AppStoreAPIError(4_000_013, "Invalid request. The end date precedes the start date or the dates are the same.")
    public static let invalidPaginationToken = AppStoreAPIError(4_000_014, "Invalid request. The pagination token is invalid.")
    public static let invalidStartDate = AppStoreAPIError(4_000_015, "Invalid request. The start date is not a timestamp value represented in milliseconds.")
    public static let invalidEndDate = AppStoreAPIError(4_000_016, "Invalid request. The end date is not a timestamp value represented in milliseconds.")
    public static let invalidNotificationType = AppStoreAPIError(4_000_018, "Invalid request. The notification type or subtype is invalid.")
    public static let multipleFiltersSupplied = AppStoreAPIError(4_000_019, "Invalid request. Supply either a transaction id or a notification type, but not both.")
    public static let invalidTestNotificationToken = AppStoreAPIError(4_000_020, "Invalid request. The test notification token is invalid.")
    public static let invalidSort = AppStoreAPIError(4_000_021, "Invalid request. The sort parameter is invalid.")
    public static let invalidProductType = AppStoreAPIError(4_000_022, "Invalid request. The product type parameter is invalid.")
    public static let invalidProductId = AppStoreAPIError(4_000_023, "Invalid request. The product id parameter is invalid.")
    public static let invalidSubscriptionGroupIdentifier = AppStoreAPIError(4_000_024, "Invalid request. The subscription group identifier parameter is invalid.")
    public static let invalidInAppOwnershipType = AppStoreAPIError(4_000_026, "Invalid request. The in-app ownership type parameter is invalid.")
    public static let invalidEmptyStorefrontCountryCodeList = AppStoreAPIError(4_000_027, "Invalid request. If provided, the list of storefront country codes must not be empty.")
    public static let invalidStorefrontCountryCode = AppStoreAPIError(4_000_028, "Invalid request. A storefront country code was invalid.")
    public static let invalidRevoked = AppStoreAPIError(4_000_030, "Invalid request. The revoked parameter is invalid.")
    public static let invalidStatus = AppStoreAPIError(4_000_031, "Invalid request. The status parameter is invalid.")
    public static let invalidAccountTenure = AppStoreAPIError(4_000_032, "Invalid request. The account tenure field is invalid.")
    public static let invalidAppAccountToken = AppStoreAPIError(4_000_033, "Invalid request. The app account token field must contain a valid UUID or an empty string.")
    public static let invalidConsumptionStatus = AppStoreAPIError(4_000_034, "Invalid request. The consumption status field is invalid.")
    public static let invalidCustomerConsented = AppStoreAPIError(4_000_035, "Invalid request. The customer consented field is required and must indicate the customer consented")
    public static let invalidDeliveryStatus = AppStoreAPIError(4_000_036, "Invalid request. The delivery status field is invalid")
    public static let invalidLifetimeDollarsPurchased = AppStoreAPIError(4_000_037, "Invalid request. The lifetime dollars purchased field is invalid")
    public static let invalidLifetimeDollarsRefunded = AppStoreAPIError(4_000_038, "Invalid request. The lifetime dollars refunded field is invalid")
    public static let invalidPlatform = AppStoreAPIError(4_000_039, "Invalid request. The platform field is invalid")
    public static let invalidPlayTime = AppStoreAPIError(4_000_040, "Invalid request. The playtime field is invalid")
    public static let invalidSampleContentProvided = AppStoreAPIError(4_000_041, "Invalid request. The sample content provided field is invalid")
    public static let invalidUserStatus = AppStoreAPIError(4_000_042, "Invalid request. The user status field is invalid")
    public static let invalidRefundPreference = AppStoreAPIError(4_000_044, "Invalid request. The refund preference field is invalid.")
    public static let appTransactionIdNotSupported = AppStoreAPIError(4_000_048, "Invalid request. App transactions aren't supported by this endpoint.")
    public static let invalidAppAccountTokenUUID = AppStoreAPIError(4_000_183, "Invalid request. The app account token field must be a valid UUID.")
    public static let familyTransactionNotSupported = AppStoreAPIError(4_000_185, "Invalid request. Family Sharing transactions aren't supported by this endpoint.")
    public static let transactionIdIsNotOriginalTransactionId = AppStoreAPIError(4_000_187, "Invalid request. The transaction ID provided is not an original transaction ID.")
    public static let consumptionPercentageAutoRenewable = AppStoreAPIError(4_000_209, "Invalid request. The consumption percentage field is not supported for auto-renewable subscription transactions.")
    public static let subscriptionExtensionIneligible = AppStoreAPIError(4_030_004, "Forbidden - subscription state ineligible for extension.")
    public static let subscriptionMaxExtension = AppStoreAPIError(4_030_005, "Forbidden - subscription has reached maximum extension count.")
    public static let familySharedSubscriptionExtensionIneligible = AppStoreAPIError(4_030_007, "Subscriptions that users obtain through Family Sharing can't get a renewal date extension directly.")
    public static let accountNotFound = AppStoreAPIError(4_040_001, "Account not found.")
    public static let originalTransactionIdNotFound = AppStoreAPIError(4_040_005, "Original transaction id not found.")
    public static let serverNotificationURLNotFound = AppStoreAPIError(4_040_007, "No App Store Server Notification URL found for provided app. Check that a URL is configured in App Store Connect for this environment.")
    public static let testNotificationNotFound = AppStoreAPIError(4_040_008, "Either the test notification token is expired or the notification and status are not yet available.")
    public static let statusRequestNotFound = AppStoreAPIError(4_040_009, "The server didn't find a subscription-renewal-date extension request for this requestIdentifier and productId combination.")
    public static let transactionIdNotFound = AppStoreAPIError(4_040_010, "Transaction id not found.")
    public static let appTransactionDoesNotExist = AppStoreAPIError(4_040_019, "No AppTransaction exists for the customer.")
    public static let rateLimitExceeded = AppStoreAPIError(4_290_000, "Rate limit exceeded.")
    public static let generalInternal = AppStoreAPIError(5_000_000, "An unknown error occurred.")
    public static let generalInternalRetryable = AppStoreAPIError(5_000_001, "An unknown error occurred. Please try again.")

    /// The error Apple answers when the simulator refuses an action with an API error code.
    static func from(_ error: SimulatorError, fallback: AppStoreAPIError) -> AppStoreAPIError {
        guard let code = error.apiErrorCode else { return fallback }
        let known: [AppStoreAPIError] = [
            .invalidExtendByDays, .subscriptionExtensionIneligible, .subscriptionMaxExtension,
            .familySharedSubscriptionExtensionIneligible, .familyTransactionNotSupported,
            .transactionIdIsNotOriginalTransactionId,
        ]
        return known.first { $0.errorCode == code } ?? AppStoreAPIError(code, error.message)
    }

    /// The response: JSON body, status from the code.
    func response() -> Response {
        var fields: HTTPFields = [.contentType: "application/json"]
        if let retryAfter { fields[.retryAfter] = retryAfter }
        let body = #"{"errorCode":\#(errorCode),"errorMessage":\#(jsonString(errorMessage))}"#
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    private func jsonString(_ text: String) -> String {
        let data = (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
