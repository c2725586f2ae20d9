import AppStoreModels
public import Crypto
public import Foundation
import SwiftASN1
public import X509

/// Signs payloads as the App Store does: compact JWS, ES256 (raw 64-byte `r||s`), with the certificate chain in
/// the `x5c` header. Used by the simulator and by tests; a verifier accepts the output when it trusts the chain's
/// root.
public struct JWSSigner: Sendable {
    /// Leaf, intermediate, root.
    public let certificateChain: [Certificate]
    private let privateKey: P256.Signing.PrivateKey
    private let headerSegment: String
    private let encoder: JSONEncoder

    /// A signer for `privateKey`, whose certificate is the first of `certificateChain`.
    public init(privateKey: P256.Signing.PrivateKey, certificateChain: [Certificate]) throws(SigningError) {
        guard let leaf = certificateChain.first else {
            throw SigningError(.invalidCertificateChain, "the certificate chain is empty")
        }
        guard leaf.publicKey == Certificate.PublicKey(privateKey.publicKey) else {
            throw SigningError(.invalidCertificateChain, "the first certificate is not for the signing key")
        }
        var x5c: [String] = []
        for certificate in certificateChain {
            var serializer = DER.Serializer()
            do {
                try serializer.serialize(certificate)
            } catch {
                throw SigningError(.encodingFailed, "certificate '\(certificate.subject)' does not serialize: \(error)")
            }
            x5c.append(Data(serializer.serializedBytes).base64EncodedString())
        }
        self.certificateChain = certificateChain
        self.privateKey = privateKey
        self.headerSegment = Self.encodeHeader(JWSHeader(alg: "ES256", x5c: x5c))
        self.encoder = AppStoreJSON.makeEncoder()
    }

    /// Signs a payload encoded as App Store JSON (dates as epoch milliseconds).
    public func sign(_ payload: some Encodable) throws(SigningError) -> String {
        let bytes: Data
        do {
            bytes = try encoder.encode(payload)
        } catch {
            throw SigningError(.encodingFailed, "payload does not encode as JSON: \(error)")
        }
        return try sign(payloadBytes: bytes)
    }

    /// Signs payload bytes as they are.
    public func sign(payloadBytes: some DataProtocol) throws(SigningError) -> String {
        try sign(headerSegment: headerSegment, payloadBytes: payloadBytes)
    }

    /// Signs with any header, however wrong; for tests that forge malformed data with a valid signature.
    func sign(header: JWSHeader, payloadBytes: some DataProtocol) throws(SigningError) -> String {
        try sign(headerSegment: Self.encodeHeader(header), payloadBytes: payloadBytes)
    }

    /// The `x5c` entries of this signer's header.
    var x5c: [String] {
        certificateChain.map { certificate in
            var serializer = DER.Serializer()
            try? serializer.serialize(certificate)
            return Data(serializer.serializedBytes).base64EncodedString()
        }
    }

    private func sign(headerSegment: String, payloadBytes: some DataProtocol) throws(SigningError) -> String {
        let signingInput = headerSegment + "." + Base64URL.encode(payloadBytes)
        do {
            let signature = try privateKey.signature(for: Data(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        } catch {
            throw SigningError(.encodingFailed, "ES256 signing failed: \(error)")
        }
    }

    static func encodeHeader(_ header: JWSHeader) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding four optional strings cannot fail.
        return Base64URL.encode((try? encoder.encode(header)) ?? Data())
    }
}
