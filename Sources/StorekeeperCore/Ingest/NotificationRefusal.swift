package import AppStoreModels
import AppStoreSigning
import Foundation
import Logging

/// Why a notification was refused.
package struct NotificationRefusal: Error, Sendable {
    package enum Kind: Sendable, Equatable {
        /// Not a notification whose claims name an app and environment, or not readable at all (a warning).
        case malformed
        /// Well-formed, but its signature, chain or data do not verify (a warning).
        case unverifiable
        /// For an app or environment this server does not serve, or the wrong one: a misconfiguration (an error).
        case misdirected
        /// The request itself could not be read (too large, too slow): `status` is what the HTTP layer answered.
        case unreadable(status: Int)
    }

    package var kind: Kind
    /// A stable code (`malformed-payload`, `untrusted-root`, `unknown-app-or-environment`, …).
    package var code: String
    package var message: String
    /// The decoded (unverified) payload, when it decoded.
    package var payload: NotificationPayload?

    package init(_ kind: Kind, code: String, message: String, payload: NotificationPayload? = nil) {
        self.kind = kind
        self.code = code
        self.message = message
        self.payload = payload
    }
}

extension VerificationError {
    /// What failed, where, for people: the nested location and the message, without the code (an answer or a kept
    /// refusal carries the code in a field of its own).
    var detail: String { location.map { "\($0): \(message)" } ?? message }
}
