package import AppStoreModels
import Crypto
package import Foundation

/// What the ledger keeps of a notification request it refused: enough for an auditor (when, why, how big, a hash to
/// match it against Apple's notification history or a sender's logs, the start of it, and the claims if they
/// parse), and never more than ``maximumBytes``, whatever the sender sent. Every text field is escaped and cut
/// (`UntrustedText`), since none of it is verified.
package struct RefusedNotification: Codable, Hashable, Sendable {
    /// The most bytes one record's text fields can hold (code 64 + message 512 + prefix 512 + hash 64 + claims
    /// 5 × 64, and the marks of what was cut), plus its numbers: the bound on storage per refused request that the
    /// HTTP API article (StorekeeperServer.docc) documents.
    package static let maximumBytes = 2_048
    /// The most bytes of the refused input's escaped start that are kept.
    package static let prefixLimit = 512

    package var receivedAt: Date
    /// The error code answered (`malformed-jws`, `untrusted-root`, …).
    package var code: String
    /// The error message answered, cut to 512 bytes.
    package var message: String
    /// The HTTP status answered.
    package var status: Int
    /// Bytes of the refused `signedPayload` (or of the body, when it had none).
    package var size: Int
    /// Lowercase hex SHA-256 of those bytes.
    package var sha256: String
    /// Their start, escaped and cut to ``prefixLimit``.
    package var prefix: String
    /// The notification's claims when its payload decodes (each escaped and cut to 64 bytes): type, subtype,
    /// UUID, signed date, and the app and environment it names.
    package var claims: Claims?

    /// The claims of a refused notification, as it stated them (unverified).
    package struct Claims: Codable, Hashable, Sendable {
        package var notificationType: String?
        package var subtype: String?
        package var notificationUUID: String?
        package var signedDate: Date?
        package var bundleId: String?
        package var environment: String?

        package init(_ payload: NotificationPayload) {
            func cut(_ text: String?) -> String? { text.map { UntrustedText.escaped($0, limit: 64) } }
            notificationType = cut(payload.notificationType.rawValue)
            subtype = cut(payload.subtype?.rawValue)
            notificationUUID = cut(payload.notificationUUID)
            signedDate = payload.signedDate
            bundleId = cut(payload.appClaims?.bundleId)
            environment = cut(payload.appClaims?.environment?.rawValue)
        }
    }

    /// A record of refused `input` (the signed payload, or the whole body when it had none): its hash, size and
    /// escaped start, the answer given, and the claims if any.
    package init(input: some Collection<UInt8>, receivedAt: Date, code: String, message: String, status: Int, claims: NotificationPayload?) {
        self.receivedAt = receivedAt
        self.code = UntrustedText.escaped(code, limit: 64)
        self.message = UntrustedText.sanitizedMessage(message, limit: 512)
        self.status = status
        self.size = input.count
        self.sha256 = SHA256.hash(data: Array(input)).map { byte in
            let digits = Array("0123456789abcdef")
            return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
        }.joined()
        self.prefix = UntrustedText.escaped(String(decoding: input.prefix(Self.prefixLimit), as: UTF8.self), limit: Self.prefixLimit)
        self.claims = claims.map(Claims.init)
    }
}
