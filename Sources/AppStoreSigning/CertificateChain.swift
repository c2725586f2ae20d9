import Crypto
import Foundation
import SwiftASN1
import X509

/// The three certificates of an App Store `x5c` header, parsed, with the root already matched byte for byte
/// against a trusted root.
struct CertificateChain: Sendable {
    let leaf: Certificate
    let intermediate: Certificate
    let root: Certificate
    /// The leaf's P-256 key, which must have made the ES256 signature.
    let leafKey: P256.Signing.PublicKey

    static let positions = ["leaf", "intermediate", "root"]

    /// A parser's error in words: swift-asn1 and swift-certificates put their source file and line in theirs
    /// (`ASN1Error.truncatedASN1Field:  SwiftASN1/ASN1.swift:202`), which no answer should carry.
    static func plain(_ error: any Error) -> String {
        "\(error)".split(separator: " ").filter { !$0.contains(".swift:") }.joined(separator: " ")
            .trimmingCharacters(in: CharacterSet(charactersIn: ": "))
    }

    /// Parses DER certificates (leaf first) and checks that the last one is a trusted root.
    init(der certificates: [[UInt8]], trustedRoots: Set<[UInt8]>) throws(VerificationError) {
        var parsed: [Certificate] = []
        for (index, der) in certificates.enumerated() {
            do {
                parsed.append(try Certificate(derEncoded: der))
            } catch {
                throw VerificationError(
                    .malformedCertificate,
                    "x5c[\(index)] (\(Self.positions[index])) is not a DER X.509 certificate: \(Self.plain(error))"
                )
            }
        }
        guard trustedRoots.contains(certificates[2]) else {
            throw VerificationError(
                .untrustedRoot,
                "x5c[2] '\(parsed[2].subject)' (SHA-256 \(Self.fingerprint(certificates[2]))) is not a configured trusted root"
            )
        }
        guard let key = P256.Signing.PublicKey(parsed[0].publicKey) else {
            throw VerificationError(
                .malformedCertificate,
                "the leaf certificate's key is not a P-256 key, so it cannot have made an ES256 signature"
            )
        }
        self.leaf = parsed[0]
        self.intermediate = parsed[1]
        self.root = parsed[2]
        self.leafKey = key
    }

    var certificates: [Certificate] { [leaf, intermediate, root] }

    /// The latest `notBefore` and earliest `notAfter` of the three: the chain is valid for times inside.
    var validityWindow: ClosedRange<Date> {
        let start = certificates.map(\.notValidBefore).max()!
        let end = certificates.map(\.notValidAfter).min()!
        return start...max(start, end)
    }

    /// Colon-separated SHA-256 of DER bytes.
    static func fingerprint(_ der: [UInt8]) -> String {
        SHA256.hash(data: der).map { byte in
            let hex = String(byte, radix: 16, uppercase: true)
            return hex.count == 1 ? "0" + hex : hex
        }.joined(separator: ":")
    }
}
