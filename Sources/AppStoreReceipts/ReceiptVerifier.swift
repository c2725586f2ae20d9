import Crypto
public import Foundation
import SwiftASN1
import Synchronization
public import X509

extension Certificate {
    /// The 2006 RSA "Apple Root CA" that app receipts chain to (not Apple Root CA - G3, which anchors StoreKit 2's
    /// JWS), bundled (SHA-256 B0:B1:73:0E:…:01:F0:24, valid 2006-04-25 to 2035-02-09).
    public static let appleIncRoot: Certificate = {
        do {
            return try Certificate(derEncoded: PackageResources.AppleIncRootCertificate_cer)
        } catch {
            fatalError("the bundled Apple Root CA (2006) does not parse: \(error)")
        }
    }()
}

/// Verifies app receipts: the PKCS#7 signature over the payload, and the signer's chain — for the App Store's, a leaf
/// with Apple's receipt-signing OID, an intermediate with Apple's WWDR OID, signed by the pinned root (never the root
/// the receipt carries), each valid at the moment judged (the receipt's creation date by default, as JWS are judged at
/// `signedDate`); for Xcode's, exactly the pinned StoreKit certificate (validity not judged: Xcode's expire). SHA-1
/// and SHA-256 receipts both (every receipt before mid-2023 is SHA-1).
public struct ReceiptVerifier: Sendable {
    /// When a receipt's certificates must be valid.
    public enum Moment: Sendable, Hashable {
        /// The receipt's creation date (field 12); now for a receipt without one.
        case creation
        case now
        case date(Date)
    }

    public var roots: [Certificate]
    /// The certificate exported from Xcode ("Save Public Certificate"), for an app configured for the Xcode
    /// environment; `nil`: Xcode receipts are refused.
    public var xcodeCertificate: Certificate?

    /// Chains (leaf and intermediate, by their DER's SHA-256) whose signatures, OIDs and CA flag were checked against
    /// these roots: only their validity at the moment judged is checked again. Receipts of one period share a chain.
    let checkedChains = CheckedChains()

    public init(roots: [Certificate] = [.appleIncRoot], xcodeCertificate: Certificate? = nil) {
        self.roots = roots
        self.xcodeCertificate = xcodeCertificate
    }

    /// A bounded set of chain digests, shared by copies of one verifier.
    final class CheckedChains: Sendable {
        private let digests = Mutex<Set<[UInt8]>>([])
        static let capacity = 64

        func contains(_ digest: [UInt8]) -> Bool { digests.withLock { $0.contains(digest) } }

        func insert(_ digest: [UInt8]) {
            digests.withLock { set in
                if set.count >= Self.capacity { set.removeAll() }
                set.insert(digest)
            }
        }
    }

    /// A receipt verified: its fields, the moment it was judged at, and which chain vouched for it.
    public struct Verified: Sendable, Hashable, Codable {
        public var receipt: AppReceipt
        public var judgedAt: Date
        /// `app-store` (the pinned Apple root) or `xcode` (the pinned Xcode certificate).
        public var signedBy: String
        /// The signer's certificate subject, and its SHA-256.
        public var signer: String
        public var signerSHA256: String
    }

    static let receiptSigningOID: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 11, 1]
    static let worldwideDeveloperRelationsOID: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 2, 1]

    /// Parses and verifies `input` (base64 or raw bytes).
    public func verify(_ input: [UInt8], at moment: Moment = .creation, now: Date = Date()) throws(ReceiptError) -> Verified {
        let parsed = try ReceiptParser.parse(input)
        let time: Date
        switch moment {
        case .creation: time = parsed.receipt.creationDate ?? now
        case .now: time = now
        case .date(let date): time = date
        }
        guard
            let index = parsed.certificates.firstIndex(where: {
                $0.serialNumber == parsed.signer.serialNumber && $0.issuer == parsed.signer.issuer
            })
        else {
            throw ReceiptError(.unsupportedSignature, "no certificate of the receipt is its signer's (issuer \(parsed.signer.issuer))")
        }
        let signer = parsed.certificates[index]
        try Self.checkSignature(parsed, signer: signer)
        // The DER the receipt carries: no need to serialize the certificate again.
        let fingerprint = SHA256.hash(data: parsed.certificateDER[index]).map { String(format: "%02x", $0) }.joined()
        if let xcode = xcodeCertificate, signer == xcode {
            return Verified(receipt: parsed.receipt, judgedAt: time, signedBy: "xcode", signer: "\(signer.subject)", signerSHA256: fingerprint)
        }
        if parsed.receipt.receiptType == "Xcode" || signer.issuer == signer.subject {
            throw ReceiptError(
                .untrustedChain,
                "signed by a self-signed certificate '\(signer.subject)' (an Xcode receipt?) that is not the configured Xcode certificate")
        }
        try checkChain(from: signer, in: parsed, at: time, moment: moment)
        return Verified(receipt: parsed.receipt, judgedAt: time, signedBy: "app-store", signer: "\(signer.subject)", signerSHA256: fingerprint)
    }

    /// RSA with SHA-1 or SHA-256 over the content, or over the signed attributes (whose message digest must be the
    /// content's).
    static func checkSignature(_ parsed: ParsedReceipt, signer: Certificate) throws(ReceiptError) {
        let info = parsed.signer
        let algorithm: Certificate.SignatureAlgorithm
        switch (info.digestAlgorithm, info.signatureAlgorithm) {
        case (.sha1, .rsaEncryption), (_, .sha1WithRSAEncryption): algorithm = .sha1WithRSAEncryption
        case (.sha256, .rsaEncryption), (_, .sha256WithRSAEncryption): algorithm = .sha256WithRSAEncryption
        // A Storekeeper simulator's (``ReceiptSigner``): its chain is ECC. Still only from a pinned root.
        case (.sha256, ReceiptSigner.ecdsaWithSHA256): algorithm = .ecdsaWithSHA256
        default:
            throw ReceiptError(
                .unsupportedSignature,
                "digest \(info.digestAlgorithm) with signature \(info.signatureAlgorithm): receipts are RSA with SHA-1 or SHA-256 (or, from a simulator, ECDSA with SHA-256)"
            )
        }
        var signed = parsed.content
        if let attributes = info.signedAttributes {
            let digest: [UInt8] =
                algorithm == .sha1WithRSAEncryption ? Array(Insecure.SHA1.hash(data: parsed.content)) : Array(SHA256.hash(data: parsed.content))
            guard info.messageDigest == digest else {
                throw ReceiptError(.signatureInvalid, "the signed attributes' message digest is not the content's: the receipt was changed")
            }
            signed = attributes
        }
        guard signer.publicKey.isValidSignature(info.signature, for: signed, signatureAlgorithm: algorithm) else {
            throw ReceiptError(
                .signatureInvalid,
                "the signature does not match the receipt's content for '\(signer.subject)': the receipt was changed or signed by another key")
        }
    }

    /// Leaf → intermediate → a pinned root, each signature checked, Apple's OIDs, each certificate valid at `time`.
    func checkChain(from leaf: Certificate, in parsed: ParsedReceipt, at time: Date, moment: Moment) throws(ReceiptError) {
        let certificates = parsed.certificates
        guard let intermediate = certificates.first(where: { $0.subject == leaf.issuer && $0 != leaf }) else {
            throw ReceiptError(.untrustedChain, "the receipt carries no certificate for the leaf's issuer '\(leaf.issuer)'")
        }
        var hasher = SHA256()
        for certificate in [leaf, intermediate] {
            guard let index = certificates.firstIndex(of: certificate) else { continue }
            hasher.update(data: parsed.certificateDER[index])
        }
        let digest = Array(hasher.finalize())
        let root: Certificate
        if checkedChains.contains(digest), let known = roots.first(where: { $0.subject == intermediate.issuer }) {
            root = known
        } else {
            root = try checkSignatures(leaf: leaf, intermediate: intermediate)
            checkedChains.insert(digest)
        }
        let described: String
        switch moment {
        case .creation: described = "the receipt's creation date"
        case .now: described = "now"
        case .date: described = "the date asked"
        }
        for (certificate, position) in [(leaf, "leaf"), (intermediate, "intermediate"), (root, "root")] {
            guard certificate.notValidBefore <= time, time <= certificate.notValidAfter else {
                throw ReceiptError(
                    .certificateExpired,
                    "\(position) certificate '\(certificate.subject)' is valid from \(certificate.notValidBefore.formatted(.iso8601)) to \(certificate.notValidAfter.formatted(.iso8601)), not at \(time.formatted(.iso8601)) (\(described))"
                )
            }
        }
    }

    /// Apple's OIDs, the CA flag, the leaf signed by the intermediate and the intermediate by a pinned root: that root.
    func checkSignatures(leaf: Certificate, intermediate: Certificate) throws(ReceiptError) -> Certificate {
        guard leaf.extensions[oid: Self.receiptSigningOID] != nil else {
            throw ReceiptError(
                .missingAppleOID, "leaf certificate '\(leaf.subject)' lacks Apple's receipt-signing extension 1.2.840.113635.100.6.11.1")
        }
        guard intermediate.extensions[oid: Self.worldwideDeveloperRelationsOID] != nil else {
            throw ReceiptError(
                .missingAppleOID, "intermediate certificate '\(intermediate.subject)' lacks Apple's WWDR extension 1.2.840.113635.100.6.2.1")
        }
        guard case .isCertificateAuthority = try? intermediate.extensions.basicConstraints else {
            throw ReceiptError(.untrustedChain, "intermediate certificate '\(intermediate.subject)' is not a certificate authority")
        }
        guard intermediate.publicKey.isValidSignature(leaf.signature, for: leaf) else {
            throw ReceiptError(.untrustedChain, "the leaf '\(leaf.subject)' is not signed by '\(intermediate.subject)'")
        }
        guard
            let root = roots.first(where: {
                $0.subject == intermediate.issuer && $0.publicKey.isValidSignature(intermediate.signature, for: intermediate)
            })
        else {
            throw ReceiptError(
                .untrustedChain, "the intermediate '\(intermediate.subject)' is not signed by a pinned root (issuer '\(intermediate.issuer)')")
        }
        return root
    }
}

extension ASN1ObjectIdentifier {
    static let sha1: ASN1ObjectIdentifier = [1, 3, 14, 3, 2, 26]
    static let sha256: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 1]
    static let rsaEncryption: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 1, 1]
    static let sha1WithRSAEncryption: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 1, 5]
    static let sha256WithRSAEncryption: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 1, 11]
}
