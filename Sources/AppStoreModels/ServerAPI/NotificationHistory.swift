public import Foundation

/// `sendAttemptResult` of a notification delivery attempt.
public struct SendAttemptResult: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let success: Self = "SUCCESS"
    public static let timedOut: Self = "TIMED_OUT"
    public static let tlsIssue: Self = "TLS_ISSUE"
    public static let circularRedirect: Self = "CIRCULAR_REDIRECT"
    public static let noResponse: Self = "NO_RESPONSE"
    public static let socketIssue: Self = "SOCKET_ISSUE"
    public static let unsupportedCharset: Self = "UNSUPPORTED_CHARSET"
    public static let invalidResponse: Self = "INVALID_RESPONSE"
    public static let prematureClose: Self = "PREMATURE_CLOSE"
    public static let unsuccessfulHTTPResponseCode: Self = "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
    public static let other: Self = "OTHER"

    public static let knownValues: [Self] = [
        .success, .timedOut, .tlsIssue, .circularRedirect, .noResponse, .socketIssue, .unsupportedCharset,
        .invalidResponse, .prematureClose, .unsuccessfulHTTPResponseCode, .other,
    ]
}

/// Get Notification History's body (send the same one for every page).
public struct NotificationHistoryRequest: Codable, Hashable, Sendable {
    public var startDate: Date
    public var endDate: Date
    public var notificationType: NotificationType?
    /// Needs `notificationType`.
    public var notificationSubtype: NotificationSubtype?
    /// Any transaction ID of the customer; not together with `notificationType`.
    public var transactionId: String?
    public var onlyFailures: Bool?

    public init(
        startDate: Date, endDate: Date, notificationType: NotificationType? = nil,
        notificationSubtype: NotificationSubtype? = nil, transactionId: String? = nil, onlyFailures: Bool? = nil
    ) {
        self.startDate = startDate
        self.endDate = endDate
        self.notificationType = notificationType
        self.notificationSubtype = notificationSubtype
        self.transactionId = transactionId
        self.onlyFailures = onlyFailures
    }
}

/// One delivery attempt.
public struct SendAttemptItem: Codable, Hashable, Sendable {
    public var attemptDate: Date?
    public var sendAttemptResult: SendAttemptResult?

    public init(attemptDate: Date? = nil, sendAttemptResult: SendAttemptResult? = nil) {
        self.attemptDate = attemptDate
        self.sendAttemptResult = sendAttemptResult
    }
}

/// One notification in the history: as it was when sent, with its attempts.
public struct NotificationHistoryResponseItem: Codable, Hashable, Sendable {
    public var signedPayload: String
    public var sendAttempts: [SendAttemptItem]?
    public var firstSendAttemptResult: SendAttemptResult?

    public init(signedPayload: String, sendAttempts: [SendAttemptItem]? = nil, firstSendAttemptResult: SendAttemptResult? = nil) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
        self.firstSendAttemptResult = firstSendAttemptResult
    }
}

/// Get Notification History: one page.
public struct NotificationHistoryResponse: Codable, Hashable, Sendable {
    public var paginationToken: String?
    public var hasMore: Bool
    public var notificationHistory: [NotificationHistoryResponseItem]

    public init(paginationToken: String? = nil, hasMore: Bool, notificationHistory: [NotificationHistoryResponseItem]) {
        self.paginationToken = paginationToken
        self.hasMore = hasMore
        self.notificationHistory = notificationHistory
    }
}

/// Request a Test Notification's answer.
public struct SendTestNotificationResponse: Codable, Hashable, Sendable {
    public var testNotificationToken: String

    public init(testNotificationToken: String) {
        self.testNotificationToken = testNotificationToken
    }
}

/// Get Test Notification Status's answer.
public struct CheckTestNotificationResponse: Codable, Hashable, Sendable {
    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]?
    public var firstSendAttemptResult: SendAttemptResult?

    public init(signedPayload: String? = nil, sendAttempts: [SendAttemptItem]? = nil, firstSendAttemptResult: SendAttemptResult? = nil) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
        self.firstSendAttemptResult = firstSendAttemptResult
    }
}
