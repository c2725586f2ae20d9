public import Crypto
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
    ///   - key: the API key that signs, with its key ID, issuer ID and bundle ID.
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

    /// Why a token was refused. The message never repeats the token.
    public struct Rejection: Error, Hashable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// Checks a token the way the App Store Server API does, as strictly: compact JWS, header `alg` ES256 and `kid`
    /// naming the key, signature by that key, `aud` `appstoreconnect-v1`, `iss`, `bid` present, `exp` after `now` and
    /// at most 60 minutes after `iat` (when `iat` is present), and `iat` not after `now` (no skew allowed: Apple
    /// refuses a token issued "in the future" by its clock, so a client must sign with an `iat` a little in the past,
    /// as `AppStoreServerAPIClient` does, and a simulator this strict catches one that does not).
    ///
    /// - Parameters:
    ///   - token: the compact JWS from the `Authorization: Bearer` header.
    ///   - keyID: the key ID the header's `kid` must name.
    ///   - issuerID: the issuer ID `iss` must be.
    ///   - publicKey: the key registered for `keyID`.
    ///   - now: the time `exp` and `iat` are judged at.
    /// - Returns: the claims.
    public static func verify(
        _ token: String,
        keyID: String,
        issuerID: String,
        publicKey: P256.Signing.PublicKey,
        now: Date = Date()
    ) throws(Rejection) -> Claims {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerBytes = try? Base64URL.decode(parts[0].utf8),
            let claimBytes = try? Base64URL.decode(parts[1].utf8),
            let signatureBytes = try? Base64URL.decode(parts[2].utf8)
        else { throw Rejection(reason: "not a compact JWS") }
        let decoder = JSONDecoder()
        guard let header = try? decoder.decode(Header.self, from: Data(headerBytes)) else {
            throw Rejection(reason: "header needs alg, kid and typ")
        }
        guard header.alg == "ES256" else { throw Rejection(reason: "alg must be ES256") }
        guard header.kid == keyID else { throw Rejection(reason: "unknown key ID") }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { throw Rejection(reason: "signature does not verify with the registered key") }
        guard let claims = try? decoder.decode(LenientClaims.self, from: Data(claimBytes)) else {
            throw Rejection(reason: "claims must hold iss, exp, aud and bid")
        }
        guard claims.aud == audience else { throw Rejection(reason: "aud must be \(audience)") }
        guard claims.iss == issuerID else { throw Rejection(reason: "unknown issuer") }
        guard !claims.bid.isEmpty else { throw Rejection(reason: "bid is empty") }
        let nowSeconds = Int64(now.timeIntervalSince1970)
        guard claims.exp > nowSeconds else { throw Rejection(reason: "token expired") }
        if let iat = claims.iat {
            guard iat <= nowSeconds else { throw Rejection(reason: "iat is in the future") }
            guard claims.exp - iat <= Int64(maximumLifetime) else {
                throw Rejection(reason: "exp is more than 60 minutes after iat")
            }
        } else if claims.exp - nowSeconds > Int64(maximumLifetime) {
            throw Rejection(reason: "exp is more than 60 minutes away")
        }
        return Claims(iss: claims.iss, iat: claims.iat ?? nowSeconds, exp: claims.exp, aud: claims.aud, bid: claims.bid)
    }

    /// Claims as clients send them: Apple's Python and Node libraries omit `iat`; some clients add a `nonce`.
    private struct LenientClaims: Decodable {
        var iss: String
        var iat: Int64?
        var exp: Int64
        var aud: String
        var bid: String
    }
}
