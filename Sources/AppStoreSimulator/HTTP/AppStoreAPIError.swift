public import AppStoreModels
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

    /// Apple's error for a code of the shared list, with its documented message.
    public init(_ code: APIErrorCode) {
        self.init(code.code, code.message)
    }

    public var status: HTTPResponse.Status { .init(code: errorCode / 10_000) }

    public static let generalBadRequest = AppStoreAPIError(.generalBadRequest)
    public static let invalidAppIdentifier = AppStoreAPIError(.invalidAppIdentifier)
    public static let invalidRequestRevision = AppStoreAPIError(.invalidRequestRevision)
    public static let invalidTransactionId = AppStoreAPIError(.invalidTransactionId)
    public static let invalidOriginalTransactionId = AppStoreAPIError(.invalidOriginalTransactionId)
    public static let invalidExtendByDays = AppStoreAPIError(.invalidExtendByDays)
    public static let invalidExtendReasonCode = AppStoreAPIError(.invalidExtendReasonCode)
    public static let invalidRequestIdentifier = AppStoreAPIError(.invalidRequestIdentifier)
    public static let startDateTooFarInPast = AppStoreAPIError(.startDateTooFarInPast)
    public static let startDateAfterEndDate = AppStoreAPIError(.startDateAfterEndDate)
    public static let invalidPaginationToken = AppStoreAPIError(.invalidPaginationToken)
    public static let invalidStartDate = AppStoreAPIError(.invalidStartDate)
    public static let invalidEndDate = AppStoreAPIError(.invalidEndDate)
    public static let invalidNotificationType = AppStoreAPIError(.invalidNotificationType)
    public static let multipleFiltersSupplied = AppStoreAPIError(.multipleFiltersSupplied)
    public static let invalidTestNotificationToken = AppStoreAPIError(.invalidTestNotificationToken)
    public static let invalidSort = AppStoreAPIError(.invalidSort)
    public static let invalidProductType = AppStoreAPIError(.invalidProductType)
    public static let invalidProductId = AppStoreAPIError(.invalidProductId)
    public static let invalidSubscriptionGroupIdentifier = AppStoreAPIError(.invalidSubscriptionGroupIdentifier)
    public static let invalidInAppOwnershipType = AppStoreAPIError(.invalidInAppOwnershipType)
    public static let invalidEmptyStorefrontCountryCodeList = AppStoreAPIError(.invalidEmptyStorefrontCountryCodeList)
    public static let invalidStorefrontCountryCode = AppStoreAPIError(.invalidStorefrontCountryCode)
    public static let invalidRevoked = AppStoreAPIError(.invalidRevoked)
    public static let invalidStatus = AppStoreAPIError(.invalidStatus)
    public static let invalidAccountTenure = AppStoreAPIError(.invalidAccountTenure)
    public static let invalidAppAccountToken = AppStoreAPIError(.invalidAppAccountToken)
    public static let invalidConsumptionStatus = AppStoreAPIError(.invalidConsumptionStatus)
    public static let invalidCustomerConsented = AppStoreAPIError(.invalidCustomerConsented)
    public static let invalidDeliveryStatus = AppStoreAPIError(.invalidDeliveryStatus)
    public static let invalidLifetimeDollarsPurchased = AppStoreAPIError(.invalidLifetimeDollarsPurchased)
    public static let invalidLifetimeDollarsRefunded = AppStoreAPIError(.invalidLifetimeDollarsRefunded)
    public static let invalidPlatform = AppStoreAPIError(.invalidPlatform)
    public static let invalidPlayTime = AppStoreAPIError(.invalidPlayTime)
    public static let invalidSampleContentProvided = AppStoreAPIError(.invalidSampleContentProvided)
    public static let invalidUserStatus = AppStoreAPIError(.invalidUserStatus)
    public static let invalidRefundPreference = AppStoreAPIError(.invalidRefundPreference)
    public static let appTransactionIdNotSupported = AppStoreAPIError(.appTransactionIdNotSupported)
    public static let invalidAppAccountTokenUUID = AppStoreAPIError(.invalidAppAccountTokenUUID)
    public static let familyTransactionNotSupported = AppStoreAPIError(.familyTransactionNotSupported)
    public static let transactionIdIsNotOriginalTransactionId = AppStoreAPIError(.transactionIdIsNotOriginalTransactionId)
    public static let consumptionPercentageAutoRenewable = AppStoreAPIError(.consumptionPercentageAutoRenewable)
    public static let subscriptionExtensionIneligible = AppStoreAPIError(.subscriptionExtensionIneligible)
    public static let subscriptionMaxExtension = AppStoreAPIError(.subscriptionMaxExtension)
    public static let familySharedSubscriptionExtensionIneligible = AppStoreAPIError(.familySharedSubscriptionExtensionIneligible)
    public static let accountNotFound = AppStoreAPIError(.accountNotFound)
    public static let originalTransactionIdNotFound = AppStoreAPIError(.originalTransactionIdNotFound)
    public static let serverNotificationURLNotFound = AppStoreAPIError(.serverNotificationURLNotFound)
    public static let testNotificationNotFound = AppStoreAPIError(.testNotificationNotFound)
    public static let statusRequestNotFound = AppStoreAPIError(.statusRequestNotFound)
    public static let transactionIdNotFound = AppStoreAPIError(.transactionIdNotFound)
    public static let appTransactionDoesNotExist = AppStoreAPIError(.appTransactionDoesNotExist)
    public static let rateLimitExceeded = AppStoreAPIError(.rateLimitExceeded)
    public static let generalInternal = AppStoreAPIError(.generalInternal)
    public static let generalInternalRetryable = AppStoreAPIError(.generalInternalRetryable)

    /// The error Apple answers when the simulator refuses an action with an API error code.
    static func from(_ error: SimulatorError, fallback: AppStoreAPIError) -> AppStoreAPIError {
        guard let code = error.apiErrorCode else { return fallback }
        return APIErrorCode.named(code).map(AppStoreAPIError.init) ?? AppStoreAPIError(code, error.message)
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
