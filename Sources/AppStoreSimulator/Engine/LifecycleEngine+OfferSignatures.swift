import AppStoreModels
import AppStoreSigning
package import Crypto
import Foundation

/// The key the developer's server signs subscription offers with, as the App Store knows it (an In-App Purchase
/// key: the simulator's API key).
package struct OfferKey: Sendable {
    package var keyId: String
    package var issuerId: String
    package var publicKey: P256.Signing.PublicKey

    package init(keyId: String, issuerId: String, publicKey: P256.Signing.PublicKey) {
        self.keyId = keyId
        self.issuerId = issuerId
        self.publicKey = publicKey
    }
}

/// What the app passes to StoreKit with a promotional or win-back offer: the V1 fields, or the V2 JWS.
package struct OfferSignatureRequest: Codable, Hashable, Sendable {
    package var keyIdentifier: String?
    package var nonce: String?
    package var timestamp: Int64?
    /// Base64 of the DER signature.
    package var signature: String?
    /// The `promotional-offer` JWS (V2).
    package var signedOffer: String?

    package init(keyIdentifier: String? = nil, nonce: String? = nil, timestamp: Int64? = nil, signature: String? = nil, signedOffer: String? = nil) {
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.timestamp = timestamp
        self.signature = signature
        self.signedOffer = signedOffer
    }
}

extension LifecycleEngine {
    /// A scenario's purchase of a promotional or win-back offer, signed as the developer's server would (V1, with the
    /// simulator's own In-App Purchase key, ``scenarioOfferKey``); `nil` for other purchases or without that key.
    func scenarioOfferSignature(for request: PurchaseRequest) throws(SimulatorError) -> OfferSignatureRequest? {
        guard let key = scenarioOfferKey, let offerId = request.offerId,
            let offer = catalog.product(request.productId)?.offers.first(where: { $0.id == offerId }),
            offer.type == .promotional || offer.type == .winBack,
            let bundleId = catalog.product(request.productId)?.bundleId
        else { return nil }
        do {
            var appKey = key
            appKey.bundleID = bundleId
            let v1 = try OfferSignatures.signV1(
                key: appKey, productId: request.productId, offerId: offerId, appAccountToken: request.appAccountToken?.description, at: state.now)
            return OfferSignatureRequest(keyIdentifier: v1.keyIdentifier, nonce: v1.nonce, timestamp: v1.timestamp, signature: v1.signature)
        } catch {
            throw SimulatorError(.invalidRequest, "the scenario's offer could not be signed: \(error)")
        }
    }

    /// How long a signature's timestamp (V1) or `iat` (V2) keeps an offer valid, as StoreKit has it.
    static let offerSignatureLifetime: TimeInterval = 24 * 3_600

    /// Checks the signature a promotional or win-back offer needs, as StoreKit does: the key, the payload (bundle,
    /// key, product, offer, the purchase's app account token, nonce, timestamp), its age (24 hours), and a nonce never
    /// used before (remembered while a signature with it could still be valid). Refused with a named reason.
    mutating func checkOfferSignature(
        _ request: PurchaseRequest, product: Catalog.Product, offer: Catalog.Offer, key: OfferKey
    ) throws(SimulatorError) {
        guard let signed = request.offerSignature else {
            throw SimulatorError(
                .invalidRequest, "a \(offer.type == .winBack ? "win-back" : "promotional") offer needs the developer's signature (offerSignature)")
        }
        let nonce: String
        let issued: Date
        if let jws = signed.signedOffer {
            let claims = try verifySignedRequest(jws, audience: "promotional-offer", bundleId: product.bundleId, key: key)
            guard claims["productId"] as? String == product.productId, claims["offerIdentifier"] as? String == offer.id else {
                throw SimulatorError(.invalidRequest, "the signed offer is for another product or offer")
            }
            // A signed offer naming a transaction is that account's alone.
            if let transactionId = claims["transactionId"] as? String,
                customerId(forAnyTransactionId: transactionId, bundleId: product.bundleId) != request.customerId
            {
                throw SimulatorError(.invalidRequest, "the signed offer names transaction \(transactionId), which is not this customer's")
            }
            guard let claimed = claims["nonce"] as? String, let iat = claims["iat"] as? Double else {
                throw SimulatorError(.invalidRequest, "the signed offer has no nonce or iat")
            }
            (nonce, issued) = (claimed.lowercased(), Date(timeIntervalSince1970: iat))
        } else {
            guard let keyId = signed.keyIdentifier, let claimed = signed.nonce, let timestamp = signed.timestamp, let signature = signed.signature
            else {
                throw SimulatorError(.invalidRequest, "the offer signature needs keyIdentifier, nonce, timestamp and signature (or signedOffer)")
            }
            guard keyId == key.keyId else {
                throw SimulatorError(.invalidRequest, "the offer is signed with key '\(keyId)', which the App Store does not know")
            }
            let payload = OfferSignatures.payloadV1(
                bundleId: product.bundleId, keyId: keyId, productId: product.productId, offerId: offer.id,
                appAccountToken: request.appAccountToken?.description ?? "", nonce: claimed, timestamp: timestamp)
            guard let der = Data(base64Encoded: signature), let parsed = try? P256.Signing.ECDSASignature(derRepresentation: der),
                key.publicKey.isValidSignature(parsed, for: Data(payload))
            else {
                throw SimulatorError(.invalidRequest, "the offer signature does not verify (payload, key, or encoding: it is base64 of DER)")
            }
            (nonce, issued) = (claimed.lowercased(), Date(timeIntervalSince1970: Double(timestamp) / 1_000))
        }
        let now = state.now
        guard issued <= now.addingTimeInterval(300), now.timeIntervalSince(issued) <= Self.offerSignatureLifetime else {
            throw SimulatorError(
                .invalidRequest,
                "the offer signature is stale or from the future (signed \(issued.formatted(.iso8601)), now \(now.formatted(.iso8601)))")
        }
        var used = state.scalars.offerNonces ?? [:]
        guard used[nonce] == nil else { throw SimulatorError(.conflict, "the offer signature's nonce \(nonce) was used already") }
        used = used.filter { now.timeIntervalSince($0.value) <= 2 * Self.offerSignatureLifetime }
        used[nonce] = issued
        state.scalars.offerNonces = used
    }

    /// The `introductory-offer-eligibility` JWS's verdict for this product, checked.
    func introductoryEligibility(_ jws: String, product: Catalog.Product, key: OfferKey) throws(SimulatorError) -> Bool {
        let claims = try verifySignedRequest(jws, audience: "introductory-offer-eligibility", bundleId: product.bundleId, key: key)
        guard claims["productId"] as? String == product.productId, let allow = claims["allowIntroductoryOffer"] as? Bool else {
            throw SimulatorError(.invalidRequest, "the eligibility signature is for another product, or has no allowIntroductoryOffer")
        }
        return allow
    }

    /// A developer's signed request (ES256, `kid` the key's, no `x5c`), its claims once verified.
    func verifySignedRequest(_ jws: String, audience: String, bundleId: String, key: OfferKey) throws(SimulatorError) -> [String: Any] {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = try? Base64URL.decode(parts[0].utf8), let body = try? Base64URL.decode(parts[1].utf8),
            let signature = try? Base64URL.decode(parts[2].utf8),
            let headerJSON = (try? JSONSerialization.jsonObject(with: Data(header))) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else {
            throw SimulatorError(.invalidRequest, "the \(audience) signature is not a compact JWS")
        }
        guard headerJSON["alg"] as? String == "ES256", headerJSON["kid"] as? String == key.keyId else {
            throw SimulatorError(.invalidRequest, "the \(audience) signature is not ES256 with key '\(key.keyId)'")
        }
        guard let raw = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            key.publicKey.isValidSignature(raw, for: Data((parts[0] + "." + parts[1]).utf8))
        else {
            throw SimulatorError(.invalidRequest, "the \(audience) signature does not verify")
        }
        guard claims["aud"] as? String == audience, claims["bid"] as? String == bundleId, claims["iss"] as? String == key.issuerId else {
            throw SimulatorError(.invalidRequest, "the \(audience) signature is for another audience, app or issuer")
        }
        return claims
    }
}
