package import AppStoreModels
package import AppStoreSigning

/// Signed fields returned verified: each call checks every JWS in the answer with a ``SignedDataVerifier`` (its
/// chain, signature, bundle ID and environment) and returns the decoded payloads. A value that fails verification
/// fails the call with ``AppStoreServerAPIError/Kind/verification``.
extension AppStoreServerAPIClient {
    /// A subscription from Get All Subscription Statuses, verified.
    package struct VerifiedSubscriptionStatus: Sendable {
        package var subscriptionGroupIdentifier: String
        package var status: SubscriptionStatus
        package var transaction: VerifiedSignedData<TransactionInfo>
        package var renewalInfo: VerifiedSignedData<RenewalInfo>
    }

    /// A notification from Get Notification History, verified, with its delivery attempts.
    package struct VerifiedNotificationRecord: Sendable {
        package var notification: VerifiedNotification
        package var sendAttempts: [SendAttemptItem]
    }

    /// Get Transaction Info, verified.
    package func transaction(
        _ transactionId: String,
        verifier: SignedDataVerifier
    ) async throws(AppStoreServerAPIError) -> VerifiedSignedData<TransactionInfo> {
        let response = try await transactionInfo(transactionId)
        return try await Self.verify("signedTransactionInfo") { () async throws(VerificationError) in
            try await verifier.verifyTransaction(response.signedTransactionInfo)
        }
    }

    /// Get Transaction History, every page verified.
    package func transactions(
        _ transactionId: String,
        query: TransactionHistoryQuery = .init(),
        version: HistoryVersion = .v2,
        verifier: SignedDataVerifier
    ) throws(AppStoreServerAPIError) -> Paginated<[VerifiedSignedData<TransactionInfo>]> {
        let pages = try transactionHistory(transactionId, query: query, version: version)
        return Paginated { (token) async throws(AppStoreServerAPIError) in
            let (page, next) = try await pages.fetch(token)
            return (try await Self.verifyTransactions(page.signedTransactions, verifier), next)
        }
    }

    /// Look Up Order ID, verified: the transactions of the order on a customer's emailed receipt (none when Apple
    /// answers that the order ID is not valid, `status` 1).
    package func orderTransactions(
        _ orderId: String,
        verifier: SignedDataVerifier
    ) async throws(AppStoreServerAPIError) -> [VerifiedSignedData<TransactionInfo>] {
        let response = try await lookUpOrder(orderId)
        guard response.status == 0 else { return [] }
        return try await Self.verifyTransactions(response.signedTransactions ?? [], verifier)
    }

    /// Get Refund History, every page verified.
    package func refunds(
        _ transactionId: String,
        verifier: SignedDataVerifier
    ) throws(AppStoreServerAPIError) -> Paginated<[VerifiedSignedData<TransactionInfo>]> {
        let pages = try refundHistory(transactionId)
        return Paginated { (token) async throws(AppStoreServerAPIError) in
            let (page, next) = try await pages.fetch(token)
            return (try await Self.verifyTransactions(page.signedTransactions, verifier), next)
        }
    }

    /// Get All Subscription Statuses, verified.
    package func subscriptionStatuses(
        _ transactionId: String,
        status: [SubscriptionStatus] = [],
        verifier: SignedDataVerifier
    ) async throws(AppStoreServerAPIError) -> [VerifiedSubscriptionStatus] {
        let response = try await allSubscriptionStatuses(transactionId, status: status)
        var result: [VerifiedSubscriptionStatus] = []
        for group in response.data {
            for item in group.lastTransactions {
                let transaction = try await Self.verify("signedTransactionInfo") { () async throws(VerificationError) in
                    try await verifier.verifyTransaction(item.signedTransactionInfo)
                }
                let renewal = try await Self.verify("signedRenewalInfo") { () async throws(VerificationError) in
                    try await verifier.verifyRenewalInfo(item.signedRenewalInfo)
                }
                result.append(
                    .init(
                        subscriptionGroupIdentifier: group.subscriptionGroupIdentifier, status: item.status,
                        transaction: transaction, renewalInfo: renewal
                    ))
            }
        }
        return result
    }

    /// Get App Transaction Info, verified.
    package func appTransaction(
        _ transactionId: String,
        verifier: SignedDataVerifier
    ) async throws(AppStoreServerAPIError) -> VerifiedSignedData<AppTransaction> {
        let response = try await appTransactionInfo(transactionId)
        return try await Self.verify("signedAppTransactionInfo") { () async throws(VerificationError) in
            try await verifier.verifyAppTransaction(response.signedAppTransactionInfo)
        }
    }

    /// Get Notification History, every page verified (with nested data).
    package func notifications(
        _ request: NotificationHistoryRequest,
        verifier: SignedDataVerifier
    ) throws(AppStoreServerAPIError) -> Paginated<[VerifiedNotificationRecord]> {
        let pages = try notificationHistory(request)
        return Paginated { (token) async throws(AppStoreServerAPIError) in
            let (page, next) = try await pages.fetch(token)
            var records: [VerifiedNotificationRecord] = []
            for item in page.notificationHistory {
                let notification = try await Self.verify("signedPayload") { () async throws(VerificationError) in
                    try await verifier.verifyNotification(item.signedPayload)
                }
                records.append(.init(notification: notification, sendAttempts: item.sendAttempts ?? []))
            }
            return (records, next)
        }
    }

    static func verifyTransactions(
        _ signed: [String],
        _ verifier: SignedDataVerifier
    ) async throws(AppStoreServerAPIError) -> [VerifiedSignedData<TransactionInfo>] {
        var result: [VerifiedSignedData<TransactionInfo>] = []
        for jws in signed {
            result.append(
                try await verify("signedTransactions") { () async throws(VerificationError) in
                    try await verifier.verifyTransaction(jws)
                })
        }
        return result
    }

    static func verify<T>(
        _ field: String,
        _ body: () async throws(VerificationError) -> T
    ) async throws(AppStoreServerAPIError) -> T {
        do {
            return try await body()
        } catch {
            throw AppStoreServerAPIError(kind: .verification, message: "\(field) did not verify: \(error)", underlying: error)
        }
    }
}
