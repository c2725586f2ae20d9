public import AppStoreModels
public import AppStoreSigning
public import Foundation
public import Logging

/// Why a notification was refused.
public struct NotificationRefusal: Error, Sendable {
    public enum Kind: Sendable, Equatable {
        /// Not a notification whose claims name an app and environment, or not readable at all (400, a warning).
        case malformed
        /// Well-formed, but its signature, chain or data do not verify (400, a warning).
        case unverifiable
        /// For an app or environment this server does not serve, or the wrong one: a misconfiguration (403, an error).
        case misdirected
        /// The request itself could not be read: too large (413), too slow (408).
        case unreadable(status: Int)

        /// The HTTP status a webhook answers.
        public var httpStatus: Int {
            switch self {
            case .malformed, .unverifiable: 400
            case .misdirected: 403
            case .unreadable(let status): status
            }
        }
    }

    public var kind: Kind
    /// A stable code (`malformed-payload`, `untrusted-root`, `unknown-app-or-environment`, …).
    public var code: String
    public var message: String
    /// The decoded (unverified) payload, when it decoded.
    public var payload: NotificationPayload?

    public init(_ kind: Kind, code: String, message: String, payload: NotificationPayload? = nil) {
        self.kind = kind
        self.code = code
        self.message = message
        self.payload = payload
    }
}
