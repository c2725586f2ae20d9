/// One endpoint of the App Store Server API (APPSTORE-SPEC §1): its method, its path and its rate-limit family. The
/// one table of Apple's endpoints: the client calls them from it and the simulator serves them from it, so a path and
/// its family are written once.
public struct AppStoreEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// The HTTP methods Apple's endpoints use.
    public enum Method: String, Sendable, Hashable {
        case get = "GET"
        case post = "POST"
        case put = "PUT"
    }

    public let method: Method
    /// The path, with a `:name` segment for each parameter (`/inApps/v1/transactions/:transactionId`).
    public let pattern: String
    public let family: APIRateLimitFamily

    public init(_ method: Method, _ pattern: String, _ family: APIRateLimitFamily) {
        self.method = method
        self.pattern = pattern
        self.family = family
    }

    public var description: String { "\(method.rawValue) \(pattern)" }

    /// The path with `parameters` in its `:name` segments, in order. Each parameter must already be a valid path
    /// segment (percent-encoded where needed).
    public func path(_ parameters: String...) -> String { path(parameters) }

    /// The path with `parameters` in its `:name` segments, in order (see ``path(_:)-(String...)``).
    public func path(_ parameters: [String]) -> String {
        var remaining = parameters[...]
        let segments = pattern.split(separator: "/", omittingEmptySubsequences: false).map { segment -> Substring in
            guard segment.hasPrefix(":") else { return segment }
            precondition(!remaining.isEmpty, "\(self) takes more parameters than were given")
            return Substring(remaining.removeFirst())
        }
        precondition(remaining.isEmpty, "\(self) takes fewer parameters than were given")
        return segments.joined(separator: "/")
    }

    /// Whether `path` (no query) is this endpoint's: the same segments, a parameter segment matching any non-empty one.
    public func matches(path: some StringProtocol) -> Bool {
        let expected = pattern.split(separator: "/", omittingEmptySubsequences: false)
        let given = path.split(separator: "/", omittingEmptySubsequences: false)
        guard expected.count == given.count else { return false }
        return zip(expected, given).allSatisfy { pattern, segment in pattern.hasPrefix(":") ? !segment.isEmpty : pattern == segment }
    }

    // MARK: - The endpoints

    public static let getTransactionInfo = Self(.get, "/inApps/v1/transactions/:transactionId", .general)
    public static let getAppTransactionInfo = Self(.get, "/inApps/v1/transactions/appTransactions/:transactionId", .general)
    public static let finishTransaction = Self(.post, "/inApps/v1/transactions/:transactionId/finish", .general)
    /// Apple names the segment `originalTransactionId`; it is `:transactionId` here because a router holds one name per
    /// position (`/inApps/v1/transactions/:transactionId` and its `/finish`).
    public static let setAppAccountToken = Self(.put, "/inApps/v1/transactions/:transactionId/appAccountToken", .extendAndToken)
    public static let getTransactionHistoryV1 = Self(.get, "/inApps/v1/history/:transactionId", .general)
    public static let getTransactionHistoryV2 = Self(.get, "/inApps/v2/history/:transactionId", .general)
    public static let getAllSubscriptionStatuses = Self(.get, "/inApps/v1/subscriptions/:transactionId", .general)
    public static let getRefundHistory = Self(.get, "/inApps/v2/refund/lookup/:transactionId", .lookupAndRefunds)
    public static let getRefundHistoryV1 = Self(.get, "/inApps/v1/refund/lookup/:originalTransactionId", .lookupAndRefunds)
    public static let lookUpOrderID = Self(.get, "/inApps/v1/lookup/:orderId", .lookupAndRefunds)
    public static let extendRenewalDate = Self(.put, "/inApps/v1/subscriptions/extend/:originalTransactionId", .extendAndToken)
    public static let extendRenewalDatesForAll = Self(.post, "/inApps/v1/subscriptions/extend/mass", .massAndTest)
    public static let getRenewalExtensionStatus = Self(.get, "/inApps/v1/subscriptions/extend/mass/:productId/:requestIdentifier", .massAndTest)
    public static let sendConsumptionInformation = Self(.put, "/inApps/v2/transactions/consumption/:transactionId", .general)
    public static let sendConsumptionInformationV1 = Self(.put, "/inApps/v1/transactions/consumption/:transactionId", .general)
    public static let getNotificationHistory = Self(.post, "/inApps/v1/notifications/history", .general)
    public static let requestTestNotification = Self(.post, "/inApps/v1/notifications/test", .massAndTest)
    public static let getTestNotificationStatus = Self(.get, "/inApps/v1/notifications/test/:testNotificationToken", .massAndTest)

    /// Every endpoint, more specific paths first (a path matches one endpoint at most in this order).
    public static let all: [AppStoreEndpoint] = [
        getAppTransactionInfo, getTransactionInfo, finishTransaction, setAppAccountToken, getTransactionHistoryV1,
        getTransactionHistoryV2, extendRenewalDatesForAll, getRenewalExtensionStatus, extendRenewalDate,
        getAllSubscriptionStatuses, getRefundHistory, getRefundHistoryV1, lookUpOrderID, sendConsumptionInformation,
        sendConsumptionInformationV1, getNotificationHistory, requestTestNotification, getTestNotificationStatus,
    ]

    /// The endpoint `method` and `path` name, if any.
    public static func matching(method: String, path: some StringProtocol) -> AppStoreEndpoint? {
        all.first { $0.method.rawValue == method && $0.matches(path: path) }
    }
}
