import AppStoreModels
import AppStoreSigning
import Foundation
import X509

/// What `storekeeper verify` prints: the decoded payload, with each nested signed value replaced in place by its
/// own verified, decoded payload, and which checks ran.
struct VerificationReport: Encodable {
    var verified = true
    var kind: String
    var checks: [String: String]
    var payload: JSONValue

    static func make(text: String, kind: SignedDataKind, verifier: SignedDataVerifier) async throws -> VerificationReport {
        switch kind {
        case .notification:
            let verified = try await verifier.verifyNotification(text)
            var report = VerificationReport(
                kind: kind.rawValue, checks: checks(verified.notification, verifier),
                payload: try JSONOutput.value(verified.payload)
            )
            if let transaction = verified.transaction {
                try report.replace("data", "signedTransactionInfo", with: transaction)
            }
            if let renewal = verified.renewalInfo {
                try report.replace("data", "signedRenewalInfo", with: renewal)
            }
            if let app = verified.appTransaction {
                try report.replace("appData", "signedAppTransactionInfo", with: app)
            }
            return report
        case .transaction:
            let verified = try await verifier.verifyTransaction(text)
            return VerificationReport(kind: kind.rawValue, checks: checks(verified, verifier), payload: try JSONOutput.value(verified.payload))
        case .renewalInfo:
            let verified = try await verifier.verifyRenewalInfo(text)
            return VerificationReport(kind: kind.rawValue, checks: checks(verified, verifier), payload: try JSONOutput.value(verified.payload))
        case .appTransaction:
            let verified = try await verifier.verifyAppTransaction(text)
            return VerificationReport(kind: kind.rawValue, checks: checks(verified, verifier), payload: try JSONOutput.value(verified.payload))
        }
    }

    /// Puts a nested value's decoded payload where its JWS was, and records its checks.
    private mutating func replace<P: Encodable>(
        _ object: String,
        _ field: String,
        with verified: VerifiedSignedData<P>
    ) throws {
        guard case .object(var fields) = payload, case .object(var inner) = fields[object] else { return }
        inner[field] = try JSONOutput.value(verified.payload)
        fields[object] = .object(inner)
        payload = .object(fields)
        checks["\(object).\(field)"] = "verified and decoded in place: signature, chain, " + Self.summary(verified)
    }

    private static func checks<P>(_ verified: VerifiedSignedData<P>, _ verifier: SignedDataVerifier) -> [String: String] {
        let configuration = verifier.configuration
        var checks = [
            "signature": "ES256 signature verified with the leaf certificate's key",
            "certificateChain": "x5c chain valid to a trusted root, with Apple's leaf and intermediate OIDs, " + summary(verified),
        ]
        if let xcode = configuration.xcodeCertificate {
            checks["signature"] = "ES256 signature verified with the pinned Xcode certificate's key"
            checks["certificateChain"] = "x5c is exactly the pinned Xcode certificate '\(xcode.subject)' (validity dates not judged)"
        }
        let unchecked = Set(verified.uncheckedClaims)
        checks["bundleId"] =
            unchecked.contains("bundleId")
            ? "not checked (no --bundle-id)" : "checked: \(configuration.bundleID ?? "")"
        checks["environment"] =
            unchecked.contains("environment")
            ? "not checked (no --environment)" : "checked: \(configuration.environment?.rawValue ?? "")"
        if unchecked.contains("appAppleId") {
            checks["appAppleId"] = "not checked (no --app-apple-id)"
        } else if let id = configuration.appAppleID {
            checks["appAppleId"] = "checked where present (required in production): \(id)"
        }
        return checks
    }

    private static func summary<P>(_ verified: VerifiedSignedData<P>) -> String {
        "certificates valid at \(verified.certificatesCheckedAt.formatted(.iso8601)) (\(verified.certificatesCheckedAtSource))"
    }
}
