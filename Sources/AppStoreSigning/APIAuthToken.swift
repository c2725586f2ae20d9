import Crypto
public import Foundation

/// The bearer token for the App Store Server API: an ES256 JWT with header `{alg, kid, typ: "JWT"}` and claims
/// `iss`, `iat`, `exp`, `aud: "appstoreconnect-v1"`, `bid` (APPSTORE-SPEC §1.1).
public enum APIAuthToken {
    /// The `aud` claim Apple requires.
    public static let audience = "appstoreconnect-v1"
    /// Apple rejects tokens whose `exp` is more than 60 minutes after `iat`.
    public static let maximumLifetime: TimeInterval = 60 * 60
    /// Apple's libraries use five minutes.
    public static let defaultLifetime: TimeInterval = 5 * 60

    /// The token's header.
    public struct Header: Codable, Hashable, Sendable {
        public var alg: String
        public var kid: String
        public var typ: String
    }

    /// The token's claims.
    public struct Claims: Codable, Hashable, Sendable {
        public var iss: String
        public var iat: Int64
        public var exp: Int64
        public var aud: String
        public var bid: String
    }

    /// Makes a signed token.
    ///
    /// - Parameters:
    ///   - issuedAt: `iat`, whole seconds.
    ///   - lifetime: seconds until `exp`; more than 0 and at most ``maximumLifetime``.
    public static func make(
        key: AppStoreAPIKey,
        issuedAt: Date = Date(),
        lifetime: TimeInterval = defaultLifetime
    ) throws(SigningError) -> String {
        guard lifetime > 0, lifetime <= maximumLifetime else {
            throw SigningError(
                .invalidLifetime,
                "token lifetime \(Int(lifetime)) s is outside 1...\(Int(maximumLifetime)) s (Apple allows at most 60 minutes)"
            )
        }
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        let header = Header(alg: "ES256", kid: key.keyID, typ: "JWT")
        let claims = Claims(iss: key.issuerID, iat: iat, exp: iat + Int64(lifetime), aud: audience, bid: key.bundleID)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let signingInput: String
        do {
            signingInput = Base64URL.encode(try encoder.encode(header)) + "." + Base64URL.encode(try encoder.encode(claims))
        } catch {
            throw SigningError(.encodingFailed, "token header or claims do not encode: \(error)")
        }
        do {
            let signature = try key.privateKey.signature(for: Data(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        } catch {
            throw SigningError(.encodingFailed, "ES256 signing of the token failed")
        }
    }
}
