public import AppStoreModels
import Crypto
import Foundation
import SwiftASN1
import X509

/// Verifies App Store signed data: notifications (with their nested signed data), transactions, renewal infos
/// and app transactions.
///
/// Checks, in order, each with its own ``VerificationError/Code``: input size (1 MiB, before any parsing); compact
/// JWS shape and strict base64url; `alg` exactly `ES256`; `x5c` of exactly three DER certificates; the root
/// byte-identical to a configured trusted root; the raw 64-byte ES256 signature with the leaf's key; the payload's
/// JSON; then, at the validation time, Apple's leaf and intermediate OIDs, the intermediate's CA flag, each
/// certificate's validity, and full RFC 5280 path validation with swift-certificates (signatures, CA flags, path
/// length, key usage, optional OCSP); finally bundle ID, app Apple ID and environment.
///
/// Chains that pass are cached by their exact certificate bytes (bounded in size and age; failures are never
/// cached), so in the steady state a JWS costs one ECDSA verification plus decoding.
public struct SignedDataVerifier: Sendable {
    /// What this verifier trusts and expects.
    public let configuration: Configuration
    private let trustedRootDER: Set<[UInt8]>
    private let cache: ChainCache
    private let validator: ChainValidator
    private let decoder: JSONDecoder
    /// The pinned Xcode certificate's DER and key (``Configuration/xcodeCertificate``).
    private let xcode: (der: [UInt8], key: P256.Signing.PublicKey)?

    public init(configuration: Configuration) {
        self.init(configuration: configuration, clock: { .now })
    }

    init(configuration: Configuration, clock: @escaping @Sendable () -> ContinuousClock.Instant) {
        self.configuration = configuration
        self.trustedRootDER = Set(
            configuration.trustedRoots.map { certificate in
                var serializer = DER.Serializer()
                try? serializer.serialize(certificate)
                return serializer.serializedBytes
            })
        self.cache = ChainCache(policy: configuration.chainCache, now: clock)
        self.validator = ChainValidator(revocation: configuration.revocation)
        self.decoder = AppStoreJSON.makeDecoder()
        self.xcode = configuration.xcodeCertificate.flatMap { certificate in
            var serializer = DER.Serializer()
            guard (try? serializer.serialize(certificate)) != nil, let key = P256.Signing.PublicKey(certificate.publicKey) else { return nil }
            return (serializer.serializedBytes, key)
        }
    }

    /// Counters of the chain cache.
    public var chainCacheStatistics: ChainCacheStatistics { cache.statistics }

    // MARK: - Public entry points

    /// Verifies a notification's `signedPayload` and every signed value nested in it.
    public func verifyNotification(_ jws: String) async throws(VerificationError) -> VerifiedNotification {
        try await verifyNotification(try CompactJWS(parsing: jws), decoded: nil)
    }

    /// Verifies a notification whose payload was decoded to route it here (``UnverifiedJWS/unsafeDecode(_:as:)``):
    /// the same checks as ``verifyNotification(_:)-(String)``, the signature over the very bytes that payload was
    /// decoded from, which is therefore not decoded again.
    public func verifyNotification(_ unverified: UnverifiedSignedData<NotificationPayload>) async throws(VerificationError) -> VerifiedNotification {
        try unverified.jws.checkSignatureLength()
        return try await verifyNotification(unverified.jws, decoded: unverified.payload)
    }

    private func verifyNotification(_ jws: CompactJWS, decoded: NotificationPayload?) async throws(VerificationError) -> VerifiedNotification {
        let notification = try await verifyNotificationEnvelope(jws, decoded: decoded)
        var result = VerifiedNotification(notification: notification)
        let payload = notification.payload
        if let data = payload.data {
            if let signed = data.signedTransactionInfo {
                let transaction = try await nested("data.signedTransactionInfo") { () async throws(VerificationError) in
                    try await verifyTransaction(signed)
                }
                try Self.check(transaction.payload, against: data)
                result.transaction = transaction
            }
            if let signed = data.signedRenewalInfo {
                let renewal = try await nested("data.signedRenewalInfo") { () async throws(VerificationError) in
                    try await verifyRenewalInfo(signed)
                }
                try Self.check(renewal.payload, against: data, transaction: result.transaction?.payload)
                result.renewalInfo = renewal
            }
        }
        if let appData = payload.appData, let signed = appData.signedAppTransactionInfo {
            let appTransaction = try await nested("appData.signedAppTransactionInfo") { () async throws(VerificationError) in
                try await verifyAppTransaction(signed)
            }
            try Self.check(appTransaction.payload, against: appData)
            result.appTransaction = appTransaction
        }
        return result
    }

    /// Verifies only a notification's outer JWS and claims, not the signed data nested in it.
    ///
    /// Storekeeper's own code uses ``verifyNotification(_:)-(String)``; this exists for benchmarks.
    package func verifyNotificationEnvelope(
        _ jws: String
    ) async throws(VerificationError) -> VerifiedSignedData<NotificationPayload> {
        try await verifyNotificationEnvelope(try CompactJWS(parsing: jws), decoded: nil)
    }

    private func verifyNotificationEnvelope(
        _ jws: CompactJWS, decoded: NotificationPayload?
    ) async throws(VerificationError) -> VerifiedSignedData<NotificationPayload> {
        var verified = try await verifyJWS(jws, decoded: decoded, as: NotificationPayload.self) { ($0.signedDate, "signedDate") }
        verified.uncheckedClaims = try checkClaims(of: verified.payload)
        return verified
    }

    /// Verifies a signed transaction (`signedTransactionInfo`, or what StoreKit 2 gives the app).
    public func verifyTransaction(_ jws: String) async throws(VerificationError) -> VerifiedSignedData<TransactionInfo> {
        try await verifyTransaction(try CompactJWS(parsing: jws), decoded: nil)
    }

    /// Verifies a signed transaction whose payload was decoded to route it here (``UnverifiedJWS/unsafeDecode(_:as:)``),
    /// as ``verifyNotification(_:)-(UnverifiedSignedData<NotificationPayload>)`` does a notification.
    public func verifyTransaction(
        _ unverified: UnverifiedSignedData<TransactionInfo>
    ) async throws(VerificationError) -> VerifiedSignedData<TransactionInfo> {
        try unverified.jws.checkSignatureLength()
        return try await verifyTransaction(unverified.jws, decoded: unverified.payload)
    }

    private func verifyTransaction(
        _ jws: CompactJWS, decoded: TransactionInfo?
    ) async throws(VerificationError) -> VerifiedSignedData<TransactionInfo> {
        var verified = try await verifyJWS(jws, decoded: decoded, as: TransactionInfo.self) { ($0.signedDate, "signedDate") }
        var unchecked = try checkBundleID(verified.payload.bundleId)
        unchecked += try checkEnvironment(verified.payload.environment, field: "environment")
        verified.uncheckedClaims = unchecked
        return verified
    }

    /// Verifies a signed renewal info.
    public func verifyRenewalInfo(_ jws: String) async throws(VerificationError) -> VerifiedSignedData<RenewalInfo> {
        var verified = try await verifyJWS(jws, as: RenewalInfo.self) { ($0.signedDate, "signedDate") }
        verified.uncheckedClaims = try checkEnvironment(verified.payload.environment, field: "environment")
        return verified
    }

    /// Verifies a signed app transaction; validity is judged at its `receiptCreationDate` by default.
    public func verifyAppTransaction(_ jws: String) async throws(VerificationError) -> VerifiedSignedData<AppTransaction> {
        var verified = try await verifyJWS(jws, as: AppTransaction.self) {
            ($0.receiptCreationDate, "receiptCreationDate")
        }
        let payload = verified.payload
        var unchecked = try checkBundleID(payload.bundleId)
        unchecked += try checkAppAppleID(payload.appAppleId, environment: payload.receiptType)
        unchecked += try checkEnvironment(payload.receiptType, field: "receiptType")
        verified.uncheckedClaims = unchecked
        return verified
    }

    // MARK: - The JWS pipeline

    private func verifyJWS<Payload: Decodable & Sendable>(
        _ text: String,
        as type: Payload.Type,
        validationDate: (Payload) -> (Date?, String)
    ) async throws(VerificationError) -> VerifiedSignedData<Payload> {
        try await verifyJWS(try CompactJWS(parsing: text), decoded: nil, as: type, validationDate: validationDate)
    }

    /// The pipeline, on a JWS split with its signature's length checked; `decoded`, when given, is its payload already
    /// decoded from `jws.payloadBytes` (as ``decodePayload(_:from:)`` would), kept once the signature is checked.
    private func verifyJWS<Payload: Decodable & Sendable>(
        _ jws: CompactJWS,
        decoded: Payload?,
        as type: Payload.Type,
        validationDate: (Payload) -> (Date?, String)
    ) async throws(VerificationError) -> VerifiedSignedData<Payload> {
        let text = jws.text
        if let xcode { return try verifyXcode(jws, pinned: xcode, decoded: decoded, as: type, validationDate: validationDate) }

        // A header seen before maps straight to its certificates and cached chain; otherwise decode it.
        var cached: ChainCache.Entry? = nil
        let certificates: [[UInt8]]
        if let (entry, known) = cache.entry(forHeader: jws.headerSegment) {
            cached = entry
            certificates = known
        } else {
            certificates = try decodeHeader(try jws.headerBytes())
            cached = cache.entry(for: certificates, header: jws.headerSegment)
        }
        var chain: CertificateChain? = nil
        let leafKey: P256.Signing.PublicKey
        if let cached {
            leafKey = cached.leafKey
        } else {
            let parsed = try CertificateChain(der: certificates, trustedRoots: trustedRootDER)
            chain = parsed
            leafKey = parsed.leafKey
        }

        let signature: P256.Signing.ECDSASignature
        do {
            signature = try P256.Signing.ECDSASignature(rawRepresentation: jws.signature)
        } catch {
            throw VerificationError(.malformedSignature, "signature is not a valid P-256 r||s value")
        }
        let signatureIsValid = jws.withSigningInput { leafKey.isValidSignature(signature, for: $0) }
        guard signatureIsValid else {
            throw VerificationError(
                .invalidSignature,
                "the ES256 signature does not match the header and payload for the leaf certificate's key"
            )
        }

        let payload: Payload
        if let decoded { payload = decoded } else { payload = try decodePayload(type, from: jws.payloadBytes) }
        let (time, source) = resolveValidationTime(validationDate(payload))

        if let cached, cached.validityWindow.contains(time) {
            return VerifiedSignedData(
                payload: payload, jws: text, certificatesCheckedAt: time, certificatesCheckedAtSource: source,
                chainFromCache: true, uncheckedClaims: []
            )
        }
        let parsed: CertificateChain
        if let chain {
            parsed = chain
        } else {
            parsed = try CertificateChain(der: certificates, trustedRoots: trustedRootDER)
        }
        try await validator.validate(parsed, at: time, timeDescription: source)
        cache.store(
            certificates, header: jws.headerSegment, leafKey: parsed.leafKey, validityWindow: parsed.validityWindow
        )
        return VerifiedSignedData(
            payload: payload, jws: text, certificatesCheckedAt: time, certificatesCheckedAtSource: source,
            chainFromCache: false, uncheckedClaims: []
        )
    }

    /// Xcode's StoreKit testing: `alg` ES256, `x5c` exactly the pinned certificate, the signature by its key; no chain,
    /// no validity dates (Apple's libraries check nothing at all for Xcode data).
    private func verifyXcode<Payload: Decodable & Sendable>(
        _ jws: CompactJWS, pinned: (der: [UInt8], key: P256.Signing.PublicKey), decoded: Payload?, as type: Payload.Type,
        validationDate: (Payload) -> (Date?, String)
    ) throws(VerificationError) -> VerifiedSignedData<Payload> {
        let header: JWSHeader
        do {
            header = try decoder.decode(JWSHeader.self, from: Data(try jws.headerBytes()))
        } catch let error as VerificationError {
            throw error
        } catch {
            throw VerificationError(.malformedHeader, "protected header: \(Self.describe(error))")
        }
        guard header.alg == "ES256" else {
            throw VerificationError(.unsupportedAlgorithm, "header alg is '\(header.alg)'; Xcode signs with ES256")
        }
        guard let x5c = header.x5c, x5c.count == 1, let der = try? Base64URL.decodeStandard(x5c[0]) else {
            throw VerificationError(
                .wrongCertificateCount, "x5c holds \(header.x5c?.count ?? 0) certificates; Xcode's data carries exactly its one certificate")
        }
        guard der == pinned.der else {
            throw VerificationError(
                .untrustedRoot,
                "x5c[0] (SHA-256 \(CertificateChain.fingerprint(der))) is not the configured Xcode certificate (SHA-256 \(CertificateChain.fingerprint(pinned.der)))"
            )
        }
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try P256.Signing.ECDSASignature(rawRepresentation: jws.signature)
        } catch {
            throw VerificationError(.malformedSignature, "signature is not a valid P-256 r||s value")
        }
        guard jws.withSigningInput({ pinned.key.isValidSignature(signature, for: $0) }) else {
            throw VerificationError(.invalidSignature, "the ES256 signature does not match the header and payload for the Xcode certificate's key")
        }
        let payload: Payload
        if let decoded { payload = decoded } else { payload = try decodePayload(type, from: jws.payloadBytes) }
        let (time, _) = validationDate(payload)
        return VerifiedSignedData(
            payload: payload, jws: jws.text, certificatesCheckedAt: time ?? Date(),
            certificatesCheckedAtSource: "not judged: the pinned Xcode certificate", chainFromCache: false, uncheckedClaims: [])
    }

    /// The `x5c` certificates' DER bytes, after checking `alg` and the chain's length.
    private func decodeHeader(_ bytes: [UInt8]) throws(VerificationError) -> [[UInt8]] {
        let header: JWSHeader
        do {
            header = try decoder.decode(JWSHeader.self, from: Data(bytes))
        } catch {
            throw VerificationError(.malformedHeader, "protected header: \(Self.describe(error))")
        }
        guard header.alg == "ES256" else {
            throw VerificationError(
                .unsupportedAlgorithm,
                "header alg is '\(header.alg)'; App Store data is signed with ES256 only"
            )
        }
        guard let x5c = header.x5c else {
            throw VerificationError(.missingCertificateChain, "header has no x5c certificate chain")
        }
        guard x5c.count == 3 else {
            throw VerificationError(
                .wrongCertificateCount,
                "x5c holds \(x5c.count) certificate\(x5c.count == 1 ? "" : "s"); App Store chains are exactly 3 (leaf, intermediate, root)"
            )
        }
        return try x5c.enumerated().map { (index, text) throws(VerificationError) -> [UInt8] in
            do throws(Base64URL.DecodingFailure) {
                let der = try Base64URL.decodeStandard(text)
                guard !der.isEmpty else { throw Base64URL.DecodingFailure(reason: "it is empty") }
                return der
            } catch {
                throw VerificationError(
                    .malformedCertificate,
                    "x5c[\(index)] (\(CertificateChain.positions[index])) is not standard base64: \(error.reason)"
                )
            }
        }
    }

    private func decodePayload<Payload: Decodable>(
        _ type: Payload.Type,
        from bytes: [UInt8]
    ) throws(VerificationError) -> Payload {
        do {
            return try Self.decode(type, from: bytes, decoder)
        } catch {
            throw VerificationError(.malformedPayload, "payload: \(Self.describe(error))", underlying: error)
        }
    }

    /// Payload JSON as `type`, by its hand-written decoder when it has one (``FastDecodablePayload``), else `decoder`'s.
    static func decode<Payload: Decodable>(_ type: Payload.Type, from bytes: [UInt8], _ decoder: JSONDecoder) throws -> Payload {
        let json = Data(bytes)
        if let fast = type as? any FastDecodablePayload.Type, let payload = try fast.init(json: json, fallback: decoder) as? Payload {
            return payload
        }
        return try decoder.decode(type, from: json)
    }

    private func resolveValidationTime(_ signed: (Date?, String)) -> (Date, String) {
        switch configuration.validationTime {
        case .signedDate:
            if let date = signed.0 { return (date, "the payload's \(signed.1)") }
            return (Date(), "the current time, because the payload has no \(signed.1)")
        case .currentTime:
            return (Date(), "the current time")
        case .fixed(let date):
            return (date, "a fixed time")
        }
    }

    private func nested<T>(
        _ location: String,
        _ body: () async throws(VerificationError) -> T
    ) async throws(VerificationError) -> T {
        do {
            return try await body()
        } catch {
            throw error.nested(in: location)
        }
    }

    /// A readable account of a decoding error: which field, and what was wrong.
    static func describe(_ error: any Error) -> String {
        func path(_ context: DecodingError.Context, _ key: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (key.map { [$0] } ?? [])
            let text = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return text.isEmpty ? "the top level" : "'\(text.replacingOccurrences(of: ".[", with: "["))'"
        }
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing required field \(path(context, key))"
        case .typeMismatch(let type, let context):
            return "field \(path(context)) is not \(type): \(context.debugDescription)"
        case .valueNotFound(let type, let context):
            return "field \(path(context)) is null; expected \(type)"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "not valid JSON (\(context.debugDescription))" }
            return "field \(path(context)) is invalid: \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}
