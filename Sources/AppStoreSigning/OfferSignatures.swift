import Crypto
public import Foundation

/// Signatures a developer's server makes for StoreKit (APPSTORE-SPEC §6): the promotional offer signature V1
/// (ECDSA over fields joined by U+2063), and the signed-request JWS of StoreKit 2 (`promotional-offer`,
/// `introductory-offer-eligibility`, `advanced-commerce-api`). Signed with the In-App Purchase key from App Store
/// Connect (an ``AppStoreAPIKey``: key ID, issuer ID, bundle ID, P-256 private key).
public enum OfferSignatures {
    /// U+2063 INVISIBLE SEPARATOR, which joins the V1 payload's fields.
    public static let separator = "\u{2063}"

    /// What StoreKit needs for a promotional offer signed the V1 way (`SKPaymentDiscount`, StoreKit 2's
    /// `.promotionalOffer(offerID:keyID:nonce:signature:timestamp:)`).
    public struct V1: Sendable, Hashable, Codable {
        public var keyIdentifier: String
        /// Lowercase, as signed.
        public var nonce: String
        /// Milliseconds since 1970, as signed; StoreKit accepts the offer for 24 hours after.
        public var timestamp: Int64
        /// The DER-encoded ECDSA signature, base64 (StoreKit 1 takes this string; StoreKit 2 takes the bytes it
        /// decodes to, not the string's UTF-8).
        public var signature: String
    }

    /// The V1 payload: `bundleId ⁣ keyId ⁣ productId ⁣ offerId ⁣ lowercase(appAccountToken) ⁣ lowercase(nonce) ⁣
    /// timestamp`, UTF-8; `appAccountToken` may be empty.
    public static func payloadV1(
        bundleId: String, keyId: String, productId: String, offerId: String, appAccountToken: String, nonce: String, timestamp: Int64
    ) -> [UInt8] {
        Array(
            [bundleId, keyId, productId, offerId, appAccountToken.lowercased(), nonce.lowercased(), String(timestamp)].joined(separator: separator)
                .utf8)
    }

    /// Signs a promotional offer the V1 way.
    public static func signV1(
        key: AppStoreAPIKey, productId: String, offerId: String, appAccountToken: String?, nonce: UUID = UUID(), at date: Date = Date()
    ) throws(SigningError) -> V1 {
        try requireFields(["productId": productId, "offerId": offerId])
        // The separator in a field would let one signature stand for another split of the same text.
        for (name, value) in [
            ("bundleId", key.bundleID), ("keyId", key.keyID), ("productId", productId), ("offerId", offerId),
            ("appAccountToken", appAccountToken ?? ""),
        ] where value.contains(separator) {
            throw SigningError(.encodingFailed, "\(name) contains U+2063, the V1 payload's separator: refused")
        }
        let timestamp = Int64((date.timeIntervalSince1970 * 1_000).rounded(.down))
        let lowercaseNonce = nonce.uuidString.lowercased()
        let payload = payloadV1(
            bundleId: key.bundleID, keyId: key.keyID, productId: productId, offerId: offerId, appAccountToken: appAccountToken ?? "",
            nonce: lowercaseNonce, timestamp: timestamp)
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try key.privateKey.signature(for: Data(payload))
        } catch {
            throw SigningError(.encodingFailed, "ECDSA signing of the offer failed")
        }
        return V1(keyIdentifier: key.keyID, nonce: lowercaseNonce, timestamp: timestamp, signature: signature.derRepresentation.base64EncodedString())
    }

    /// The `promotional-offer` JWS (StoreKit 2's `Product.PurchaseOption.promotionalOffer(_:compactJWS:)`):
    /// `productId`, `offerIdentifier` and, when known, the customer's `transactionId`.
    public static func promotionalOfferJWS(
        key: AppStoreAPIKey, productId: String, offerIdentifier: String, transactionId: String?, nonce: UUID = UUID(), at date: Date = Date()
    ) throws(SigningError) -> String {
        try requireFields(["productId": productId, "offerIdentifier": offerIdentifier])
        var claims: [String: ClaimValue] = ["productId": .string(productId), "offerIdentifier": .string(offerIdentifier)]
        if let transactionId { claims["transactionId"] = .string(transactionId) }
        return try signedRequest(key: key, audience: "promotional-offer", claims: claims, nonce: nonce, at: date)
    }

    /// The `introductory-offer-eligibility` JWS: whether the customer may have the product's introductory offer.
    public static func introductoryOfferEligibilityJWS(
        key: AppStoreAPIKey, productId: String, allowIntroductoryOffer: Bool, transactionId: String, nonce: UUID = UUID(), at date: Date = Date()
    ) throws(SigningError) -> String {
        try requireFields(["productId": productId, "transactionId": transactionId])
        return try signedRequest(
            key: key, audience: "introductory-offer-eligibility",
            claims: [
                "productId": .string(productId), "allowIntroductoryOffer": .bool(allowIntroductoryOffer), "transactionId": .string(transactionId),
            ], nonce: nonce, at: date)
    }

    /// The `advanced-commerce-api` JWS: `request` is the standard base64 of the request's UTF-8 JSON.
    public static func advancedCommerceJWS(
        key: AppStoreAPIKey, requestJSON: [UInt8], nonce: UUID = UUID(), at date: Date = Date()
    ) throws(SigningError) -> String {
        guard (try? JSONSerialization.jsonObject(with: Data(requestJSON))) is [String: Any] else {
            throw SigningError(.encodingFailed, "the advanced commerce request is not a JSON object")
        }
        return try signedRequest(
            key: key, audience: "advanced-commerce-api", claims: ["request": .string(Data(requestJSON).base64EncodedString())], nonce: nonce, at: date
        )
    }

    /// A claim's value.
    public enum ClaimValue: Sendable, Hashable, Encodable {
        case string(String)
        case bool(Bool)
        case integer(Int64)

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let text): try container.encode(text)
            case .bool(let flag): try container.encode(flag)
            case .integer(let number): try container.encode(number)
            }
        }
    }

    /// Header `{"alg":"ES256","kid","typ":"JWT"}` (no `x5c`); claims `iss`, `iat` (seconds), `aud`, `bid`, `nonce`
    /// (a lowercase UUID) and `claims`; no `exp`.
    public static func signedRequest(
        key: AppStoreAPIKey, audience: String, claims: [String: ClaimValue], nonce: UUID, at date: Date
    ) throws(SigningError) -> String {
        var all = claims
        all["iss"] = .string(key.issuerID)
        all["iat"] = .integer(Int64(date.timeIntervalSince1970.rounded(.down)))
        all["aud"] = .string(audience)
        all["bid"] = .string(key.bundleID)
        all["nonce"] = .string(nonce.uuidString.lowercased())
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let signingInput: String
        do {
            let header = APIAuthToken.Header(alg: "ES256", kid: key.keyID, typ: "JWT")
            signingInput = Base64URL.encode(try encoder.encode(header)) + "." + Base64URL.encode(try encoder.encode(all))
        } catch {
            throw SigningError(.encodingFailed, "the JWS header or claims do not encode: \(error)")
        }
        do {
            let signature = try key.privateKey.signature(for: Data(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        } catch {
            throw SigningError(.encodingFailed, "ES256 signing of the JWS failed")
        }
    }

    private static func requireFields(_ fields: [String: String]) throws(SigningError) {
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) where value.isEmpty {
            throw SigningError(.missingCredential, "\(name) is empty")
        }
    }
}
