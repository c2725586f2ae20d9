import Crypto
import Foundation

/// A Standard Webhooks signing secret (standardwebhooks.com): `whsec_` followed by the base64 of 24 to 64 random
/// bytes, the HMAC-SHA256 key. Its description never shows the key.
package struct WebhookSecret: Sendable, CustomStringConvertible {
    /// Why a text is not a secret; the text itself is never repeated.
    package struct Invalid: Error, Equatable, CustomStringConvertible {
        package var description: String
    }

    package static let prefix = "whsec_"
    /// The key sizes the specification allows, in bytes.
    package static let keySizes = 24...64

    let key: SymmetricKey

    /// Reads `text`, `whsec_` + base64 (padded or not) of 24-64 bytes.
    package init(_ text: String) throws(Invalid) {
        guard text.hasPrefix(Self.prefix) else {
            throw Invalid(description: "a webhook secret starts with \"\(Self.prefix)\" (the Standard Webhooks form), followed by base64")
        }
        var encoded = String(text.dropFirst(Self.prefix.count))
        encoded += String(repeating: "=", count: (4 - encoded.count % 4) % 4)
        guard let bytes = Data(base64Encoded: encoded) else {
            throw Invalid(description: "a webhook secret's text after \"\(Self.prefix)\" must be base64")
        }
        guard Self.keySizes.contains(bytes.count) else {
            throw Invalid(
                description:
                    "a webhook secret must hold \(Self.keySizes.lowerBound) to \(Self.keySizes.upperBound) bytes; this one holds \(bytes.count)"
            )
        }
        key = SymmetricKey(data: bytes)
    }

    /// A new random secret of 32 bytes, as `whsec_…` text.
    package static func generate() -> String {
        prefix + SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
    }

    package var description: String { "whsec_… (\(key.bitCount / 8) bytes)" }
}
