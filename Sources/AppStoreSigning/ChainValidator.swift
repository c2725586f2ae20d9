import Foundation
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// Validates an App Store certificate chain at a given time: explicit Apple checks first, so each failure has
/// its own error, then full RFC 5280 path validation with swift-certificates as the authority.
struct ChainValidator: Sendable {
    let revocation: RevocationChecking

    static func format(_ date: Date) -> String { date.formatted(.iso8601) }

    func validate(_ chain: CertificateChain, at time: Date, timeDescription: String) async throws(VerificationError) {
        try Self.checkAppleShape(chain)
        try Self.checkValidity(chain, at: time, timeDescription: timeDescription)
        try await validatePath(chain, at: time)
    }

    /// Apple's OIDs and the CA flag, each with its own error.
    static func checkAppleShape(_ chain: CertificateChain) throws(VerificationError) {
        guard chain.leaf.extensions[oid: .AppleCertificateExtension.receiptSigning] != nil else {
            throw VerificationError(
                .leafMissingAppleOID,
                "leaf certificate '\(chain.leaf.subject)' lacks Apple's receipt-signing extension 1.2.840.113635.100.6.11.1"
            )
        }
        guard chain.intermediate.extensions[oid: .AppleCertificateExtension.worldwideDeveloperRelations] != nil else {
            throw VerificationError(
                .intermediateMissingAppleOID,
                "intermediate certificate '\(chain.intermediate.subject)' lacks Apple's WWDR extension 1.2.840.113635.100.6.2.1"
            )
        }
        let constraints = try? chain.intermediate.extensions.basicConstraints
        guard case .isCertificateAuthority = constraints else {
            throw VerificationError(
                .intermediateNotCA,
                "intermediate certificate '\(chain.intermediate.subject)' is not a certificate authority (basicConstraints CA flag not set)"
            )
        }
    }

    /// Each certificate's validity period at `time`, naming the certificate and both dates.
    static func checkValidity(_ chain: CertificateChain, at time: Date, timeDescription: String) throws(VerificationError) {
        for (certificate, position) in zip(chain.certificates, CertificateChain.positions) {
            if time > certificate.notValidAfter {
                throw VerificationError(
                    .certificateExpired,
                    "\(position) certificate '\(certificate.subject)' expired at \(format(certificate.notValidAfter)) (checked at \(format(time)), \(timeDescription))"
                )
            }
            if time < certificate.notValidBefore {
                throw VerificationError(
                    .certificateNotYetValid,
                    "\(position) certificate '\(certificate.subject)' is not valid before \(format(certificate.notValidBefore)) (checked at \(format(time)), \(timeDescription))"
                )
            }
        }
    }

    /// RFC 5280 path validation (signatures, CA flags, path length, name constraints, validity) and key usage with
    /// swift-certificates; the path found must be exactly leaf → intermediate → root. Then, if enabled, OCSP.
    private func validatePath(_ chain: CertificateChain, at time: Date) async throws(VerificationError) {
        var verifier = Verifier(rootCertificates: CertificateStore([chain.root])) {
            RFC5280Policy(fixedExpiryValidationTime: time)
            AppStoreKeyUsagePolicy()
        }
        let result = await verifier.validate(leaf: chain.leaf, intermediates: CertificateStore([chain.intermediate]))
        switch result {
        case .validCertificate(let validated):
            let path = Array(validated)
            guard path == chain.certificates else {
                throw VerificationError(
                    .invalidCertificateChain,
                    "the path found (\(path.count) certificates) is not leaf → intermediate → root as sent in x5c"
                )
            }
        case .couldNotValidate(let failures):
            throw Self.explain(chain, failures: failures)
        }
        // The path is valid, so a failure from here on can only come from the revocation check.
        if let ocsp = revocation.ocspPolicy() {
            var online = Verifier(rootCertificates: CertificateStore([chain.root])) {
                RFC5280Policy(fixedExpiryValidationTime: time)
                ocsp
            }
            let result = await online.validate(leaf: chain.leaf, intermediates: CertificateStore([chain.intermediate]))
            if case .couldNotValidate(let failures) = result {
                let reasons = failures.map { String(describing: $0.policyFailureReason) }
                throw VerificationError(
                    .certificateRevoked,
                    "OCSP revocation check failed: \(reasons.isEmpty ? "no answer" : reasons.joined(separator: "; "))"
                )
            }
        }
    }

    /// Turns a failed path validation into the most specific error that explains it.
    private static func explain(
        _ chain: CertificateChain,
        failures: [CertificateValidationResult.PolicyFailure]
    ) -> VerificationError {
        let handled: [ASN1ObjectIdentifier] = [
            .X509ExtensionID.basicConstraints, .X509ExtensionID.keyUsage, .X509ExtensionID.nameConstraints,
        ]
        for (certificate, position) in zip(chain.certificates, CertificateChain.positions) {
            if let unknown = certificate.extensions.first(where: { $0.critical && !handled.contains($0.oid) }) {
                return VerificationError(
                    .invalidCertificateChain,
                    "\(position) certificate '\(certificate.subject)' has an unsupported critical extension \(unknown.oid)"
                )
            }
        }
        if !chain.intermediate.publicKey.isValidSignature(chain.leaf.signature, for: chain.leaf) {
            return VerificationError(
                .invalidCertificateChain,
                "leaf certificate '\(chain.leaf.subject)' is not signed by intermediate '\(chain.intermediate.subject)'"
            )
        }
        if !chain.root.publicKey.isValidSignature(chain.intermediate.signature, for: chain.intermediate) {
            return VerificationError(
                .invalidCertificateChain,
                "intermediate certificate '\(chain.intermediate.subject)' is not signed by root '\(chain.root.subject)'"
            )
        }
        let reasons = failures.map { String(describing: $0.policyFailureReason) }
        if reasons.isEmpty {
            return VerificationError(
                .invalidCertificateChain,
                "no valid path from leaf '\(chain.leaf.subject)' to root '\(chain.root.subject)'"
            )
        }
        return VerificationError(.invalidCertificateChain, "path validation failed: \(reasons.joined(separator: "; "))")
    }
}

/// Key usage as App Store chains carry it: the leaf signs data (digitalSignature) and is not a CA; the CAs sign
/// certificates (keyCertSign). swift-certificates' RFC 5280 policy deliberately leaves key usage unpoliced.
struct AppStoreKeyUsagePolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) -> PolicyEvaluationResult {
        guard let leaf = chain.first else { return .failsToMeetPolicy(reason: "empty chain") }
        if case .isCertificateAuthority = try? leaf.extensions.basicConstraints {
            return .failsToMeetPolicy(reason: "leaf certificate '\(leaf.subject)' is a CA; a signing leaf must not be")
        }
        do {
            if let usage = try leaf.extensions.keyUsage, !usage.digitalSignature {
                return .failsToMeetPolicy(reason: "leaf certificate '\(leaf.subject)' key usage lacks digitalSignature")
            }
            for issuer in chain.dropFirst() {
                if let usage = try issuer.extensions.keyUsage, !usage.keyCertSign {
                    return .failsToMeetPolicy(reason: "CA certificate '\(issuer.subject)' key usage lacks keyCertSign")
                }
            }
        } catch {
            return .failsToMeetPolicy(reason: "unreadable key usage extension: \(error)")
        }
        return .meetsPolicy
    }
}
