import Crypto
package import Foundation

/// The headers that sign one webhook delivery, as the Standard Webhooks specification defines them:
/// `webhook-id` (the event's ID, the same on every retry, for the receiver to deduplicate), `webhook-timestamp`
/// (seconds since 1970, of this attempt) and `webhook-signature`: `v1,` + the base64 of HMAC-SHA256 over
/// `id.timestamp.body`, one per secret, separated by spaces (several while a secret is rotated).
package struct WebhookSignature: Sendable, Equatable {
    package var id: String
    package var timestamp: Int64
    package var signature: String

    /// Signs `body` (the exact bytes sent) with every secret in `secrets`, in order.
    package init(id: String, timestamp: Int64, body: some DataProtocol, secrets: [WebhookSecret]) {
        self.id = id
        self.timestamp = timestamp
        self.signature = secrets.map { Self.sign(id: id, timestamp: timestamp, body: body, key: $0.key) }.joined(separator: " ")
    }

    /// The three headers, by name.
    package var headers: [(name: String, value: String)] {
        [("webhook-id", id), ("webhook-timestamp", String(timestamp)), ("webhook-signature", signature)]
    }

    /// `v1,` + base64(HMAC-SHA256(key, "id.timestamp.body")).
    static func sign(id: String, timestamp: Int64, body: some DataProtocol, key: SymmetricKey) -> String {
        var authenticator = HMAC<SHA256>(key: key)
        authenticator.update(data: Array("\(id).\(timestamp).".utf8))
        authenticator.update(data: body)
        return "v1," + Data(authenticator.finalize()).base64EncodedString()
    }

    /// Whether `signatureHeader` holds a `v1` signature of `id.timestamp.body` by `secret` (compared in constant
    /// time), the check a receiver makes; and `timestamp` within `tolerance` seconds of `now`.
    package static func verify(
        id: String, timestamp: Int64, body: some DataProtocol, signatureHeader: String, secret: WebhookSecret,
        now: Date = Date(), tolerance: TimeInterval = 300
    ) -> Bool {
        guard abs(now.timeIntervalSince1970 - Double(timestamp)) <= tolerance else { return false }
        let signed = Array("\(id).\(timestamp).".utf8) + Array(body)
        for candidate in signatureHeader.split(separator: " ") {
            let parts = candidate.split(separator: ",", maxSplits: 1)
            guard parts.count == 2, parts[0] == "v1", let given = Data(base64Encoded: String(parts[1])) else { continue }
            if HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: signed, using: secret.key) { return true }
        }
        return false
    }
}
