/// Get Transaction Info: `{signedTransactionInfo}`.
public struct TransactionInfoResponse: Codable, Hashable, Sendable {
    public var signedTransactionInfo: String
    public init(signedTransactionInfo: String) { self.signedTransactionInfo = signedTransactionInfo }
}

/// Get App Transaction Info: `{signedAppTransactionInfo}`.
public struct AppTransactionInfoResponse: Codable, Hashable, Sendable {
    public var signedAppTransactionInfo: String
    public init(signedAppTransactionInfo: String) { self.signedAppTransactionInfo = signedAppTransactionInfo }
}

/// Get Transaction History (v1 and v2): one page.
public struct HistoryResponse: Codable, Hashable, Sendable {
    /// The token for the next page.
    public var revision: String?
    public var hasMore: Bool
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: AppStoreEnvironment?
    public var signedTransactions: [String]

    public init(
        revision: String?, hasMore: Bool, bundleId: String?, appAppleId: Int64?, environment: AppStoreEnvironment?,
        signedTransactions: [String]
    ) {
        self.revision = revision
        self.hasMore = hasMore
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
        self.signedTransactions = signedTransactions
    }
}

/// Get All Subscription Statuses.
public struct StatusResponse: Codable, Hashable, Sendable {
    /// One subscription group's subscriptions.
    public struct SubscriptionGroupItem: Codable, Hashable, Sendable {
        public var subscriptionGroupIdentifier: String
        public var lastTransactions: [LastTransactionsItem]

        public init(subscriptionGroupIdentifier: String, lastTransactions: [LastTransactionsItem]) {
            self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
            self.lastTransactions = lastTransactions
        }
    }

    /// One subscription: its status and latest signed data.
    public struct LastTransactionsItem: Codable, Hashable, Sendable {
        public var status: SubscriptionStatus
        public var originalTransactionId: String
        public var signedTransactionInfo: String
        public var signedRenewalInfo: String

        public init(status: SubscriptionStatus, originalTransactionId: String, signedTransactionInfo: String, signedRenewalInfo: String) {
            self.status = status
            self.originalTransactionId = originalTransactionId
            self.signedTransactionInfo = signedTransactionInfo
            self.signedRenewalInfo = signedRenewalInfo
        }
    }

    public var environment: AppStoreEnvironment?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var data: [SubscriptionGroupItem]

    public init(environment: AppStoreEnvironment? = nil, bundleId: String? = nil, appAppleId: Int64? = nil, data: [SubscriptionGroupItem]) {
        self.environment = environment
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.data = data
    }
}

/// Get Refund History v2: one page.
public struct RefundHistoryResponse: Codable, Hashable, Sendable {
    public var signedTransactions: [String]
    public var revision: String?
    public var hasMore: Bool

    public init(signedTransactions: [String], revision: String? = nil, hasMore: Bool) {
        self.signedTransactions = signedTransactions
        self.revision = revision
        self.hasMore = hasMore
    }
}

/// Get Refund History V1 (deprecated): up to 50 refunds.
public struct RefundLookupResponse: Codable, Hashable, Sendable {
    public var signedTransactions: [String]

    public init(signedTransactions: [String]) {
        self.signedTransactions = signedTransactions
    }
}

/// Look Up Order ID: status 0 with the order's transactions, or 1 (invalid order ID).
public struct OrderLookupResponse: Codable, Hashable, Sendable {
    public var status: Int
    public var signedTransactions: [String]?

    public init(status: Int, signedTransactions: [String]? = nil) {
        self.status = status
        self.signedTransactions = signedTransactions
    }
}

/// Set App Account Token's body.
public struct UpdateAppAccountTokenRequest: Codable, Hashable, Sendable {
    public var appAccountToken: LowercaseUUID
    public init(appAccountToken: LowercaseUUID) { self.appAccountToken = appAccountToken }
}

/// An error body: `{"errorCode": 4040010, "errorMessage": "Transaction id not found."}`.
public struct ErrorResponse: Codable, Hashable, Sendable {
    public var errorCode: Int?
    public var errorMessage: String?

    public init(errorCode: Int? = nil, errorMessage: String? = nil) {
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }
}
