/// Why signing, or loading what signing needs, failed. Messages never contain key material.
public struct SigningError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable, machine-readable reason.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The private key is not a P-256 key in PKCS#8 PEM (a `.p8` file) or SEC1 PEM.
        public static let invalidPrivateKey = Code(rawValue: "invalid-private-key")
        /// The private key file could not be read.
        public static let unreadableKeyFile = Code(rawValue: "unreadable-key-file")
        /// The private key file may be read or written by group or others (it must be mode 0600 or stricter).
        public static let exposedKeyFile = Code(rawValue: "exposed-key-file")
        /// A token lifetime outside what Apple accepts (more than 0, at most 60 minutes).
        public static let invalidLifetime = Code(rawValue: "invalid-lifetime")
        /// A required credential (issuer ID, key ID, bundle ID) is empty.
        public static let missingCredential = Code(rawValue: "missing-credential")
        /// The certificate chain given to a signer is unusable.
        public static let invalidCertificateChain = Code(rawValue: "invalid-certificate-chain")
        /// The payload could not be encoded, or a certificate could not be made.
        public static let encodingFailed = Code(rawValue: "encoding-failed")
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
