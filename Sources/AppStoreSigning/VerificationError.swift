import AppStoreModels

/// Why signed App Store data was rejected.
///
/// Every check has its own stable ``Code`` (printed by `storekeeper verify` as `error: <code>: <message>`), and the
/// message names what failed and why. Messages never contain private keys or tokens; they may quote public
/// certificate names and payload fields, which are unverified at that point: the message is escaped and bounded
/// (`UntrustedText`), so it can go into a log line as it is.
public struct VerificationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable, machine-readable reason.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The input is larger than the verifier accepts (1 MiB); nothing was parsed.
        public static let inputTooLarge = Code(rawValue: "input-too-large")
        /// Not a compact JWS: not three non-empty dot-separated segments.
        public static let malformedJWS = Code(rawValue: "malformed-jws")
        /// A segment is not valid unpadded base64url.
        public static let invalidBase64URL = Code(rawValue: "invalid-base64url")
        /// The protected header is not a JSON object of the expected shape.
        public static let malformedHeader = Code(rawValue: "malformed-header")
        /// `alg` is not exactly `ES256`.
        public static let unsupportedAlgorithm = Code(rawValue: "unsupported-algorithm")
        /// The header has no `x5c` certificate chain.
        public static let missingCertificateChain = Code(rawValue: "missing-certificate-chain")
        /// `x5c` does not hold exactly three certificates.
        public static let wrongCertificateCount = Code(rawValue: "wrong-certificate-count")
        /// A certificate in `x5c` is not valid base64 DER X.509, or its key is not P-256 where one is needed.
        public static let malformedCertificate = Code(rawValue: "malformed-certificate")
        /// The chain's root is not one of the configured trusted roots.
        public static let untrustedRoot = Code(rawValue: "untrusted-root")
        /// The leaf lacks Apple's receipt-signing OID 1.2.840.113635.100.6.11.1.
        public static let leafMissingAppleOID = Code(rawValue: "leaf-missing-apple-oid")
        /// The intermediate lacks Apple's WWDR OID 1.2.840.113635.100.6.2.1.
        public static let intermediateMissingAppleOID = Code(rawValue: "intermediate-missing-apple-oid")
        /// The intermediate certificate is not a certificate authority.
        public static let intermediateNotCA = Code(rawValue: "intermediate-not-ca")
        /// A certificate had expired at the validation time.
        public static let certificateExpired = Code(rawValue: "certificate-expired")
        /// A certificate was not yet valid at the validation time.
        public static let certificateNotYetValid = Code(rawValue: "certificate-not-yet-valid")
        /// Path validation failed: a certificate is not signed by the next one, or a CA flag, key usage or other
        /// RFC 5280 constraint is violated.
        public static let invalidCertificateChain = Code(rawValue: "invalid-certificate-chain")
        /// Online revocation checking (OCSP) rejected a certificate.
        public static let certificateRevoked = Code(rawValue: "certificate-revoked")
        /// The signature is not a raw 64-byte ES256 `r||s` value (for example it is DER-encoded).
        public static let malformedSignature = Code(rawValue: "malformed-signature")
        /// The ES256 signature does not verify with the leaf certificate's key.
        public static let invalidSignature = Code(rawValue: "invalid-signature")
        /// The payload is not JSON of the expected shape.
        public static let malformedPayload = Code(rawValue: "malformed-payload")
        /// `bundleId` differs from the expected one.
        public static let bundleIDMismatch = Code(rawValue: "bundle-id-mismatch")
        /// `appAppleId` differs from the expected one, or is missing in production.
        public static let appAppleIDMismatch = Code(rawValue: "app-apple-id-mismatch")
        /// `environment` differs from the expected one, or is missing.
        public static let environmentMismatch = Code(rawValue: "environment-mismatch")
        /// A nested signed value disagrees with the notification that carries it.
        public static let nestedDataMismatch = Code(rawValue: "nested-data-mismatch")
        /// The verifier's configuration is unusable (for example production without an app Apple ID).
        public static let invalidConfiguration = Code(rawValue: "invalid-configuration")
    }

    /// The reason, stable across releases.
    public var code: Code
    /// What failed and why, for people.
    public var message: String
    /// Where the failure happened inside a notification (`data.signedTransactionInfo`), if nested.
    public var location: String?
    /// The error that caused this one, if any.
    public var underlying: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, location: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = UntrustedText.sanitizedMessage(message)
        self.location = location
        self.underlying = underlying
    }

    /// `code: message`, with the nested location first when there is one.
    public var description: String {
        if let location { return "\(code): \(location): \(message)" }
        return "\(code): \(message)"
    }

    /// The same error, attributed to a nested signed field.
    func nested(in location: String) -> VerificationError {
        var copy = self
        copy.location = self.location.map { "\(location).\($0)" } ?? location
        return copy
    }

    public static func == (lhs: VerificationError, rhs: VerificationError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.location == rhs.location
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
        hasher.combine(location)
    }
}
