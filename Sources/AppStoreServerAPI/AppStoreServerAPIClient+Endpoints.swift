package import AppStoreModels
import Foundation
import NIOHTTP1

extension AppStoreServerAPIClient {
    /// Which transaction-history endpoint.
    package enum HistoryVersion: String, Sendable { case v1, v2 }

    // MARK: - Transactions

    /// Get Transaction Info (any transaction ID; not an app transaction ID).
    package func transactionInfo(_ transactionId: String) async throws(AppStoreServerAPIError) -> TransactionInfoResponse {
        try Self.checkTransactionId(transactionId)
        return try await send(.getTransactionInfo, [transactionId], as: TransactionInfoResponse.self)
    }

    /// Get Transaction History: every page, v2 by default. Any transaction ID of the customer works.
    package func transactionHistory(
        _ transactionId: String,
        query: TransactionHistoryQuery = .init(),
        version: HistoryVersion = .v2
    ) throws(AppStoreServerAPIError) -> Paginated<HistoryResponse> {
        try Self.checkTransactionId(transactionId)
        try query.validate()
        let endpoint: AppStoreEndpoint = version == .v2 ? .getTransactionHistoryV2 : .getTransactionHistoryV1
        return Paginated { (revision) async throws(AppStoreServerAPIError) in
            let parameters = query.parameters + (revision.map { [("revision", $0)] } ?? [])
            let page = try await self.send(endpoint, [transactionId], query: parameters, as: HistoryResponse.self)
            return (page, page.hasMore ? page.revision : nil)
        }
    }

    /// Get All Subscription Statuses, optionally only those with the given statuses.
    package func allSubscriptionStatuses(
        _ transactionId: String,
        status: [SubscriptionStatus] = []
    ) async throws(AppStoreServerAPIError) -> StatusResponse {
        try Self.checkTransactionId(transactionId)
        for value in status where !(1...5).contains(value.rawValue) { throw .invalid("status \(value) is not 1-5") }
        return try await send(
            .getAllSubscriptionStatuses, [transactionId], query: status.map { ("status", String($0.rawValue)) }, as: StatusResponse.self
        )
    }

    /// Get Refund History (v2): every page, oldest refund first.
    package func refundHistory(_ transactionId: String) throws(AppStoreServerAPIError) -> Paginated<RefundHistoryResponse> {
        try Self.checkTransactionId(transactionId)
        return Paginated { (revision) async throws(AppStoreServerAPIError) in
            let page = try await self.send(
                .getRefundHistory, [transactionId], query: revision.map { [("revision", $0)] } ?? [], as: RefundHistoryResponse.self
            )
            return (page, page.hasMore ? page.revision : nil)
        }
    }

    /// Get Refund History V1 (deprecated): up to 50 refunds.
    package func refundLookupV1(_ originalTransactionId: String) async throws(AppStoreServerAPIError) -> RefundLookupResponse {
        try Self.checkTransactionId(originalTransactionId)
        return try await send(.getRefundHistoryV1, [originalTransactionId], as: RefundLookupResponse.self)
    }

    /// Look Up Order ID (production only).
    package func lookUpOrder(_ orderId: String) async throws(AppStoreServerAPIError) -> OrderLookupResponse {
        guard !orderId.isEmpty, orderId.count <= 64, orderId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            throw .invalid("order ID '\(orderId)' must be 1-64 letters and digits")
        }
        return try await send(.lookUpOrderID, [orderId], as: OrderLookupResponse.self)
    }

    /// Get App Transaction Info (any transaction ID of the customer).
    package func appTransactionInfo(_ transactionId: String) async throws(AppStoreServerAPIError) -> AppTransactionInfoResponse {
        try Self.checkTransactionId(transactionId)
        return try await send(.getAppTransactionInfo, [transactionId], as: AppTransactionInfoResponse.self)
    }

    /// Finish Transaction (API 1.20).
    package func finishTransaction(_ transactionId: String) async throws(AppStoreServerAPIError) {
        try Self.checkTransactionId(transactionId)
        _ = try await send(.finishTransaction, [transactionId], as: Empty.self)
    }

    /// Set App Account Token (original transaction ID only).
    package func setAppAccountToken(
        _ originalTransactionId: String,
        token: LowercaseUUID
    ) async throws(AppStoreServerAPIError) {
        try Self.checkTransactionId(originalTransactionId)
        _ = try await send(
            .setAppAccountToken, [originalTransactionId], body: UpdateAppAccountTokenRequest(appAccountToken: token), as: Empty.self
        )
    }

    // MARK: - Extensions

    /// Extend a Subscription Renewal Date.
    package func extendRenewalDate(
        _ originalTransactionId: String,
        _ request: ExtendRenewalDateRequest
    ) async throws(AppStoreServerAPIError) -> ExtendRenewalDateResponse {
        try Self.checkTransactionId(originalTransactionId)
        try Self.checkExtension(days: request.extendByDays, reason: request.extendReasonCode, identifier: request.requestIdentifier)
        return try await send(
            .extendRenewalDate, [originalTransactionId], body: request, as: ExtendRenewalDateResponse.self
        )
    }

    /// Extend Subscription Renewal Dates for All Active Subscribers (asynchronous at Apple).
    package func extendRenewalDatesForAllActiveSubscribers(
        _ request: MassExtendRenewalDateRequest
    ) async throws(AppStoreServerAPIError) -> MassExtendRenewalDateResponse {
        try Self.checkExtension(days: request.extendByDays, reason: request.extendReasonCode, identifier: request.requestIdentifier)
        guard !request.productId.isEmpty else { throw .invalid("productId is empty") }
        if let codes = request.storefrontCountryCodes {
            guard !codes.isEmpty else { throw .invalid("storefrontCountryCodes, if given, must not be empty (leave it out for all storefronts)") }
            for code in codes where !APIRequestRules.isStorefrontCountryCode(code) {
                throw .invalid("storefront '\(code)' is not an ISO 3166-1 alpha-3 code")
            }
        }
        return try await send(
            .extendRenewalDatesForAll, body: request, as: MassExtendRenewalDateResponse.self
        )
    }

    /// Get Status of Subscription Renewal Date Extensions.
    package func massExtensionStatus(
        productId: String,
        requestIdentifier: String
    ) async throws(AppStoreServerAPIError) -> MassExtendRenewalDateStatusResponse {
        guard !productId.isEmpty else { throw .invalid("productId is empty") }
        try Self.checkRequestIdentifier(requestIdentifier)
        return try await send(
            .getRenewalExtensionStatus, [Self.segment(productId), Self.segment(requestIdentifier)],
            as: MassExtendRenewalDateStatusResponse.self
        )
    }

    // MARK: - Consumption

    /// Send Consumption Information (v2). Send it only when the customer consented, within 12 hours of the
    /// `CONSUMPTION_REQUEST`.
    package func sendConsumptionInformation(
        _ transactionId: String,
        _ request: ConsumptionRequest
    ) async throws(AppStoreServerAPIError) {
        try Self.checkTransactionId(transactionId)
        guard request.customerConsented else { throw .invalid("customerConsented must be true; without consent, send nothing") }
        if let percentage = request.consumptionPercentage {
            guard APIRequestRules.consumptionPercentage.contains(percentage) else { throw .invalid("consumptionPercentage is milliunits 0-100000") }
            if request.deliveryStatus != .delivered && percentage != 0 {
                throw .invalid("consumptionPercentage must be 0 when the content was not delivered")
            }
            if request.refundPreference == .grantProrated && !(1...99_999).contains(percentage) {
                throw .invalid("GRANT_PRORATED needs a consumptionPercentage between 1 and 99999")
            }
        }
        _ = try await send(.sendConsumptionInformation, [transactionId], body: request, as: Empty.self)
    }

    /// Send Consumption Information V1 (deprecated).
    package func sendConsumptionInformationV1(
        _ transactionId: String,
        _ request: ConsumptionRequestV1
    ) async throws(AppStoreServerAPIError) {
        try Self.checkTransactionId(transactionId)
        guard request.customerConsented else { throw .invalid("customerConsented must be true") }
        let ranges: [(String, Int, ClosedRange<Int>)] = [
            ("consumptionStatus", request.consumptionStatus, 0...3), ("platform", request.platform, 0...2),
            ("deliveryStatus", request.deliveryStatus, 0...5), ("accountTenure", request.accountTenure, 0...7),
            ("playTime", request.playTime, 0...7), ("lifetimeDollarsRefunded", request.lifetimeDollarsRefunded, 0...7),
            ("lifetimeDollarsPurchased", request.lifetimeDollarsPurchased, 0...7), ("userStatus", request.userStatus, 0...4),
            ("refundPreference", request.refundPreference ?? 0, 0...3),
        ]
        for (name, value, range) in ranges where !range.contains(value) {
            throw .invalid("\(name) is \(value); it must be \(range.lowerBound)-\(range.upperBound)")
        }
        guard request.appAccountToken.isEmpty || UUID(uuidString: request.appAccountToken) != nil else {
            throw .invalid("appAccountToken must be a UUID or empty")
        }
        _ = try await send(.sendConsumptionInformationV1, [transactionId], body: request, as: Empty.self)
    }

    // MARK: - Notifications

    /// Get Notification History: every page, with the same body each time.
    package func notificationHistory(
        _ request: NotificationHistoryRequest
    ) throws(AppStoreServerAPIError) -> Paginated<NotificationHistoryResponse> {
        if let (_, reason) = APIRequestRules.refusal(of: request) { throw .invalid(reason) }
        return Paginated { (token) async throws(AppStoreServerAPIError) in
            let page = try await self.send(
                .getNotificationHistory, query: token.map { [("paginationToken", $0)] } ?? [], body: request,
                as: NotificationHistoryResponse.self
            )
            return (page, page.hasMore ? page.paginationToken : nil)
        }
    }

    /// Request a Test Notification.
    package func requestTestNotification() async throws(AppStoreServerAPIError) -> SendTestNotificationResponse {
        try await send(.requestTestNotification, as: SendTestNotificationResponse.self)
    }

    /// Get Test Notification Status.
    package func testNotificationStatus(_ token: String) async throws(AppStoreServerAPIError) -> CheckTestNotificationResponse {
        guard !token.isEmpty, token.utf8.count <= 256 else { throw .invalid("the test notification token is empty or too long") }
        // Apple's tokens are a UUID, `_` and milliseconds: anything else (a path, a line break) is refused before sending.
        guard token.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) }), token != ".", token != ".." else {
            throw .invalid("the test notification token \(UntrustedText.quoted(token, limit: 64)) is not one (letters, digits, '-', '_' and '.')")
        }
        return try await send(
            .getTestNotificationStatus, [Self.segment(token)], as: CheckTestNotificationResponse.self
        )
    }

    // MARK: - Validation

    /// Transaction IDs are strings of digits.
    static func checkTransactionId(_ id: String) throws(AppStoreServerAPIError) {
        guard APIRequestRules.isTransactionId(id) else {
            throw .invalid("transaction ID \(UntrustedText.quoted(id, limit: 40)) must be 1-20 digits")
        }
    }

    static func checkRequestIdentifier(_ identifier: String) throws(AppStoreServerAPIError) {
        guard APIRequestRules.isRequestIdentifier(identifier) else {
            throw .invalid("requestIdentifier must be 1-128 characters")
        }
    }

    static func checkExtension(days: Int, reason: ExtendReasonCode, identifier: String) throws(AppStoreServerAPIError) {
        guard APIRequestRules.extendByDays.contains(days) else { throw .invalid("extendByDays is \(days); it must be 1-90") }
        guard APIRequestRules.extendReasonCodes.contains(reason.rawValue) else { throw .invalid("extendReasonCode \(reason) is not 0-3") }
        try checkRequestIdentifier(identifier)
    }
}
