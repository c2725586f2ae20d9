public import Crypto
public import Foundation
import SwiftASN1
public import X509

/// A certificate authority that issues Apple-shaped chains for tests and the simulator: a P-384 root, a P-384
/// intermediate carrying Apple's WWDR OID (1.2.840.113635.100.6.2.1), and P-256 leaves carrying the
/// receipt-signing OID (1.2.840.113635.100.6.11.1), with the same extensions and key usages as Apple's.
///
/// A ``SignedDataVerifier`` accepts what its signers sign when ``rootCertificate`` is among its trusted roots.
/// Never configure a production verifier with a test root.
public struct TestCertificateAuthority: Sendable {
    /// The names on the three certificates.
    public struct Names: Sendable {
        public var root: DistinguishedName
        public var intermediate: DistinguishedName
        public var leaf: DistinguishedName

        public init(root: DistinguishedName, intermediate: DistinguishedName, leaf: DistinguishedName) {
            self.root = root
            self.intermediate = intermediate
            self.leaf = leaf
        }

        /// Names that say plainly what the chain is: `<label> Root CA`, `<label> Intermediate CA`, `<label> Signing`.
        public static func storekeeper(_ label: String = "Storekeeper Test") -> Names {
            Names(
                root: distinguishedName(label + " Root CA", unit: "Storekeeper Test Certification Authority"),
                intermediate: distinguishedName(label + " Intermediate CA", unit: "G6"),
                leaf: distinguishedName(label + " Signing", unit: "Storekeeper Simulator")
            )
        }

        /// Apple's exact names, for forgery tests: a chain with these names must still be rejected unless its root
        /// is byte-identical to a trusted one.
        public static let imitatingApple = Names(
            root: distinguishedName(
                "Apple Root CA - G3", unit: "Apple Certification Authority", organization: "Apple Inc."
            ),
            intermediate: distinguishedName(
                "Apple Worldwide Developer Relations Certification Authority", unit: "G6", organization: "Apple Inc."
            ),
            leaf: distinguishedName(
                "Prod ECC Mac App Store and iTunes Store Receipt Signing",
                unit: "Apple Worldwide Developer Relations", organization: "Apple Inc."
            )
        )

        static func distinguishedName(
            _ commonName: String,
            unit: String,
            organization: String = "Storekeeper"
        ) -> DistinguishedName {
            // Building a name from printable strings cannot fail.
            (try? DistinguishedName {
                CommonName(commonName)
                OrganizationalUnitName(unit)
                OrganizationName(organization)
                CountryName("US")
            }) ?? DistinguishedName()
        }
    }

    /// How the root and intermediate are made. The defaults give a chain Apple would issue; the switches make the
    /// broken chains that tests need.
    public struct Options: Sendable {
        public var names: Names = .storekeeper()
        /// Validity of the root and intermediate.
        public var validity: ClosedRange<Date>
        /// Whether the intermediate carries Apple's WWDR OID.
        public var intermediateHasAppleOID = true
        /// Whether the intermediate is a CA (basicConstraints CA:TRUE, pathlen 0).
        public var intermediateIsCertificateAuthority = true

        /// Valid from a day ago for 20 years.
        public init(now: Date = Date()) {
            self.validity = now.addingTimeInterval(-86_400)...now.addingTimeInterval(20 * 365 * 86_400)
        }
    }

    /// How a leaf is made.
    public struct LeafOptions: Sendable {
        /// The leaf's validity; `nil` gives the CA's validity.
        public var validity: ClosedRange<Date>?
        /// Whether the leaf carries Apple's receipt-signing OID.
        public var hasAppleOID = true
        /// An OCSP responder URI for the leaf's Authority Information Access, as Apple's leaves have; `nil` for none.
        public var ocspResponderURI: String?

        public init(validity: ClosedRange<Date>? = nil, hasAppleOID: Bool = true, ocspResponderURI: String? = nil) {
            self.validity = validity
            self.hasAppleOID = hasAppleOID
            self.ocspResponderURI = ocspResponderURI
        }
    }

    /// The root certificate: give this to a verifier's trusted roots.
    public let rootCertificate: Certificate
    /// The intermediate certificate.
    public let intermediateCertificate: Certificate
    public let options: Options
    private let intermediateKey: P384.Signing.PrivateKey

    /// A CA restored from its saved parts (see ``intermediatePrivateKeyPEM``).
    public init(
        rootCertificate: Certificate,
        intermediateCertificate: Certificate,
        intermediatePrivateKeyPEM: String,
        options: Options = Options()
    ) throws(SigningError) {
        let key: P384.Signing.PrivateKey
        do {
            key = try P384.Signing.PrivateKey(pemRepresentation: intermediatePrivateKeyPEM)
        } catch {
            throw SigningError(.invalidPrivateKey, "the intermediate CA key is not a P-384 PEM private key")
        }
        guard intermediateCertificate.publicKey == Certificate.PublicKey(key.publicKey) else {
            throw SigningError(.invalidCertificateChain, "the intermediate CA key does not match its certificate")
        }
        guard rootCertificate.publicKey.isValidSignature(intermediateCertificate.signature, for: intermediateCertificate) else {
            throw SigningError(.invalidCertificateChain, "the intermediate certificate is not signed by the root")
        }
        var options = options
        // New leaves live as long as the intermediate, under the saved names.
        options.validity = intermediateCertificate.notValidBefore...intermediateCertificate.notValidAfter
        options.names.root = rootCertificate.subject
        options.names.intermediate = intermediateCertificate.subject
        self.init(
            rootCertificate: rootCertificate, intermediateCertificate: intermediateCertificate, options: options,
            intermediateKey: key
        )
    }

    /// The intermediate CA's private key as PEM: a secret of this test CA, for saving it (the simulator keeps it in
    /// its own directory). Anyone with it can sign data that verifiers trusting ``rootCertificate`` accept.
    public var intermediatePrivateKeyPEM: String { intermediateKey.pemRepresentation }

    private init(
        rootCertificate: Certificate,
        intermediateCertificate: Certificate,
        options: Options,
        intermediateKey: P384.Signing.PrivateKey
    ) {
        self.rootCertificate = rootCertificate
        self.intermediateCertificate = intermediateCertificate
        self.options = options
        self.intermediateKey = intermediateKey
    }

    /// Makes a new root and intermediate with fresh keys.
    public static func generate(options: Options = Options()) throws(SigningError) -> TestCertificateAuthority {
        let rootKey = P384.Signing.PrivateKey()
        let intermediateKey = P384.Signing.PrivateKey()
        let names = options.names
        do {
            let rootKeyID = keyIdentifier(Certificate.PublicKey(rootKey.publicKey))
            let root = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: Certificate.PublicKey(rootKey.publicKey),
                notValidBefore: options.validity.lowerBound,
                notValidAfter: options.validity.upperBound,
                issuer: names.root,
                subject: names.root,
                signatureAlgorithm: .ecdsaWithSHA384,
                extensions: try Certificate.Extensions {
                    SubjectKeyIdentifier(keyIdentifier: rootKeyID)
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                },
                issuerPrivateKey: Certificate.PrivateKey(rootKey)
            )
            let intermediatePublicKey = Certificate.PublicKey(intermediateKey.publicKey)
            let intermediate = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: intermediatePublicKey,
                notValidBefore: options.validity.lowerBound,
                notValidAfter: options.validity.upperBound,
                issuer: names.root,
                subject: names.intermediate,
                signatureAlgorithm: .ecdsaWithSHA384,
                extensions: try Certificate.Extensions {
                    if options.intermediateIsCertificateAuthority {
                        Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                        Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    } else {
                        Critical(BasicConstraints.notCertificateAuthority)
                        Critical(KeyUsage(digitalSignature: true))
                    }
                    AuthorityKeyIdentifier(keyIdentifier: rootKeyID)
                    SubjectKeyIdentifier(keyIdentifier: keyIdentifier(intermediatePublicKey))
                    if options.intermediateHasAppleOID {
                        appleMarker(.AppleCertificateExtension.worldwideDeveloperRelations)
                    }
                },
                issuerPrivateKey: Certificate.PrivateKey(rootKey)
            )
            return TestCertificateAuthority(
                rootCertificate: root, intermediateCertificate: intermediate, options: options,
                intermediateKey: intermediateKey
            )
        } catch {
            throw SigningError(.encodingFailed, "could not make the test CA: \(error)")
        }
    }

    /// Issues a leaf certificate for a new P-256 key and returns a signer that signs with it.
    public func makeSigner(leaf leafOptions: LeafOptions = LeafOptions()) throws(SigningError) -> JWSSigner {
        let (key, chain) = try issueLeaf(leafOptions)
        return try JWSSigner(privateKey: key, certificateChain: chain)
    }

    /// Issues a leaf certificate for a new P-256 key: the key, and the chain leaf, intermediate, root (for signers of
    /// other formats than JWS, e.g. the simulator's app receipts).
    public func issueLeaf(
        _ leafOptions: LeafOptions = LeafOptions()
    ) throws(SigningError) -> (key: P256.Signing.PrivateKey, chain: [Certificate]) {
        let key = P256.Signing.PrivateKey()
        let validity = leafOptions.validity ?? options.validity
        let leaf: Certificate
        do {
            let publicKey = Certificate.PublicKey(key.publicKey)
            leaf = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: publicKey,
                notValidBefore: validity.lowerBound,
                notValidAfter: validity.upperBound,
                issuer: options.names.intermediate,
                subject: options.names.leaf,
                signatureAlgorithm: .ecdsaWithSHA384,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    AuthorityKeyIdentifier(
                        keyIdentifier: Self.keyIdentifier(intermediateCertificate.publicKey)
                    )
                    SubjectKeyIdentifier(keyIdentifier: Self.keyIdentifier(publicKey))
                    Critical(KeyUsage(digitalSignature: true))
                    if leafOptions.hasAppleOID {
                        Self.appleMarker(.AppleCertificateExtension.receiptSigning)
                    }
                    if let uri = leafOptions.ocspResponderURI {
                        AuthorityInformationAccess([
                            .init(method: .ocspServer, location: .uniformResourceIdentifier(uri))
                        ])
                    }
                },
                issuerPrivateKey: Certificate.PrivateKey(intermediateKey)
            )
        } catch {
            throw SigningError(.encodingFailed, "could not issue a leaf certificate: \(error)")
        }
        return (key, [leaf, intermediateCertificate, rootCertificate])
    }

    /// An Apple marker extension: the OID with an ASN.1 NULL value, as in Apple's certificates.
    private static func appleMarker(_ oid: ASN1ObjectIdentifier) -> Certificate.Extension {
        Certificate.Extension(oid: oid, critical: false, value: [0x05, 0x00])
    }

    /// SHA-1 of the public key, the usual subject key identifier.
    private static func keyIdentifier(_ key: Certificate.PublicKey) -> ArraySlice<UInt8> {
        ArraySlice(Insecure.SHA1.hash(data: Array(key.subjectPublicKeyInfoBytes)))
    }
}
