import AppStoreModels
package import Foundation

/// A failed App Store Server API call: what kind of failure, Apple's HTTP status and numeric error code (known or
/// not), the message, and the cause. Messages and descriptions never contain the token or the private key.
package struct AppStoreServerAPIError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    package struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package var description: String { rawValue }

        /// The request was refused before sending (bad identifier, out-of-range value, …). Nothing was sent.
        package static let invalidRequest = Kind(rawValue: "invalid-request")
        /// The App Store answered with an error status (and usually an error code).
        package static let apiError = Kind(rawValue: "api-error")
        /// 401: the token was refused (check key ID, issuer ID, bundle ID and the key itself).
        package static let unauthorized = Kind(rawValue: "unauthorized")
        /// No answer: connection failure, reset, or a request timeout.
        package static let transport = Kind(rawValue: "transport")
        /// The total deadline ran out before a successful answer.
        package static let deadlineExceeded = Kind(rawValue: "deadline-exceeded")
        /// The answer was not the JSON expected.
        package static let malformedResponse = Kind(rawValue: "malformed-response")
        /// A signed value in the answer did not verify.
        package static let verification = Kind(rawValue: "verification")
        /// The client is misconfigured (credentials, base URL).
        package static let configuration = Kind(rawValue: "configuration")
    }

    package var kind: Kind
    /// The HTTP status, when the App Store answered.
    package var httpStatus: Int?
    /// Apple's numeric error code (e.g. 4040010), known to this build or not.
    package var errorCode: Int?
    /// What failed, for people.
    package var message: String
    /// How many attempts were made.
    package var attempts: Int
    /// The App Store's `Retry-After`, when it sent one.
    package var retryAfter: Date?
    /// The error that caused this one.
    package var underlying: (any Error & Sendable)?

    package init(
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
    package var errorName: String? { errorCode.flatMap { APIErrorCode.named($0)?.name } }

    /// Whether Apple documents this failure as worth retrying: 4040002, 4040004, 4040006, 5000001, 429, a 5xx
    /// without an error code, and transport failures.
    package var isRetryable: Bool {
        switch kind {
        case .transport: return true
        case .apiError:
            if let errorCode { return APIErrorCode.named(errorCode)?.isRetryable ?? APIErrorCode.retryable.contains(errorCode) }
            return httpStatus == 429 || (httpStatus ?? 0) >= 500
        default: return false
        }
    }

    package var description: String { "\(kind): \(detail)" }

    /// Everything but the kind: status, code and name, message, attempts.
    package var detail: String {
        var parts: [String] = []
        if let httpStatus { parts.append("HTTP \(httpStatus)") }
        if let errorCode { parts.append("\(errorCode)" + (errorName.map { " \($0)" } ?? "")) }
        let attemptsText = attempts > 1 ? " (after \(attempts) attempts)" : ""
        return (parts.isEmpty ? "" : parts.joined(separator: " ") + ": ") + message + attemptsText
    }
}
