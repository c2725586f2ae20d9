package import AppStoreModels
import Foundation
package import Hummingbird

/// An App Store Server API error as Apple answers it: the HTTP status is the code's first three digits and the
/// body is `{"errorCode": …, "errorMessage": …}`. A handler throws it; Hummingbird answers with `response(from:context:)`.
package struct AppStoreAPIError: HTTPResponseError, Hashable, Sendable {
    package var errorCode: Int
    package var errorMessage: String
    /// `Retry-After` on 429: a UNIX time in milliseconds, as Apple documents it.
    package var retryAfter: String?

    package init(_ errorCode: Int, _ errorMessage: String) {
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }

    /// Apple's error for a code of the shared list, with its documented message.
    package init(_ code: APIErrorCode) {
        self.init(code.code, code.message)
    }

    package var status: HTTPResponse.Status { .init(code: errorCode / 10_000) }

    package static let generalBadRequest = AppStoreAPIError(.generalBadRequest)
    package static let invalidAppIdentifier = AppStoreAPIError(.invalidAppIdentifier)
    package static let invalidRequestRevision = AppStoreAPIError(.invalidRequestRevision)
    package static let invalidTransactionId = AppStoreAPIError(.invalidTransactionId)
    package static let invalidOriginalTransactionId = AppStoreAPIError(.invalidOriginalTransactionId)
    package static let invalidExtendByDays = AppStoreAPIError(.invalidExtendByDays)
    package static let invalidExtendReasonCode = AppStoreAPIError(.invalidExtendReasonCode)
    package static let invalidRequestIdentifier = AppStoreAPIError(.invalidRequestIdentifier)
    package static let startDateTooFarInPast = AppStoreAPIError(.startDateTooFarInPast)
    package static let startDateAfterEndDate = AppStoreAPIError(.startDateAfterEndDate)
    package static let invalidPaginationToken = AppStoreAPIError(.invalidPaginationToken)
    package static let invalidStartDate = AppStoreAPIError(.invalidStartDate)
    package static let invalidEndDate = AppStoreAPIError(.invalidEndDate)
    package static let invalidNotificationType = AppStoreAPIError(.invalidNotificationType)
    package static let multipleFiltersSupplied = AppStoreAPIError(.multipleFiltersSupplied)
    package static let invalidTestNotificationToken = AppStoreAPIError(.invalidTestNotificationToken)
    package static let invalidSort = AppStoreAPIError(.invalidSort)
    package static let invalidProductType = AppStoreAPIError(.invalidProductType)
    package static let invalidProductId = AppStoreAPIError(.invalidProductId)
    package static let invalidSubscriptionGroupIdentifier = AppStoreAPIError(.invalidSubscriptionGroupIdentifier)
    package static let invalidInAppOwnershipType = AppStoreAPIError(.invalidInAppOwnershipType)
    package static let invalidEmptyStorefrontCountryCodeList = AppStoreAPIError(.invalidEmptyStorefrontCountryCodeList)
    package static let invalidStorefrontCountryCode = AppStoreAPIError(.invalidStorefrontCountryCode)
    package static let invalidRevoked = AppStoreAPIError(.invalidRevoked)
    package static let invalidStatus = AppStoreAPIError(.invalidStatus)
    package static let invalidAccountTenure = AppStoreAPIError(.invalidAccountTenure)
    package static let invalidAppAccountToken = AppStoreAPIError(.invalidAppAccountToken)
    package static let invalidConsumptionStatus = AppStoreAPIError(.invalidConsumptionStatus)
    package static let invalidCustomerConsented = AppStoreAPIError(.invalidCustomerConsented)
    package static let invalidDeliveryStatus = AppStoreAPIError(.invalidDeliveryStatus)
    package static let invalidLifetimeDollarsPurchased = AppStoreAPIError(.invalidLifetimeDollarsPurchased)
    package static let invalidLifetimeDollarsRefunded = AppStoreAPIError(.invalidLifetimeDollarsRefunded)
    package static let invalidPlatform = AppStoreAPIError(.invalidPlatform)
    package static let invalidPlayTime = AppStoreAPIError(.invalidPlayTime)
    package static let invalidSampleContentProvided = AppStoreAPIError(.invalidSampleContentProvided)
    package static let invalidUserStatus = AppStoreAPIError(.invalidUserStatus)
    package static let invalidRefundPreference = AppStoreAPIError(.invalidRefundPreference)
    package static let appTransactionIdNotSupported = AppStoreAPIError(.appTransactionIdNotSupported)
    package static let invalidAppAccountTokenUUID = AppStoreAPIError(.invalidAppAccountTokenUUID)
    package static let familyTransactionNotSupported = AppStoreAPIError(.familyTransactionNotSupported)
    package static let transactionIdIsNotOriginalTransactionId = AppStoreAPIError(.transactionIdIsNotOriginalTransactionId)
    package static let consumptionPercentageAutoRenewable = AppStoreAPIError(.consumptionPercentageAutoRenewable)
    package static let subscriptionExtensionIneligible = AppStoreAPIError(.subscriptionExtensionIneligible)
    package static let subscriptionMaxExtension = AppStoreAPIError(.subscriptionMaxExtension)
    package static let familySharedSubscriptionExtensionIneligible = AppStoreAPIError(.familySharedSubscriptionExtensionIneligible)
    package static let accountNotFound = AppStoreAPIError(.accountNotFound)
    package static let originalTransactionIdNotFound = AppStoreAPIError(.originalTransactionIdNotFound)
    package static let serverNotificationURLNotFound = AppStoreAPIError(.serverNotificationURLNotFound)
    package static let testNotificationNotFound = AppStoreAPIError(.testNotificationNotFound)
    package static let statusRequestNotFound = AppStoreAPIError(.statusRequestNotFound)
    package static let transactionIdNotFound = AppStoreAPIError(.transactionIdNotFound)
    package static let appTransactionDoesNotExist = AppStoreAPIError(.appTransactionDoesNotExist)
    package static let rateLimitExceeded = AppStoreAPIError(.rateLimitExceeded)
    package static let generalInternal = AppStoreAPIError(.generalInternal)
    package static let generalInternalRetryable = AppStoreAPIError(.generalInternalRetryable)

    /// The error Apple answers when the simulator refuses an action with an API error code.
    static func from(_ error: SimulatorError, fallback: AppStoreAPIError) -> AppStoreAPIError {
        guard let code = error.apiErrorCode else { return fallback }
        return APIErrorCode.named(code).map(AppStoreAPIError.init) ?? AppStoreAPIError(code, error.message)
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response { response() }

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
