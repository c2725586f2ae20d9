import AppStoreModels
import AppStoreSigning
import ArgumentParser
import Foundation
import StorekeeperServer
import SwiftASN1
import X509

struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify App Store signed data and print its decoded payload as JSON.",
        discussion: """
            Verifies a notification (and every signed value nested in it), a transaction, a renewal info or an app \
            transaction: ES256 signature, x5c chain to a trusted root with Apple's OIDs, certificate validity, and \
            the bundle ID, app Apple ID and environment when given. On failure prints `error: <code>: <message>` \
            to standard error and exits 1.
            """
    )

    @Option(name: .customLong("root"), help: "A trusted root certificate (DER or PEM). Repeatable. Default: the bundled Apple Root CA - G3.")
    var roots: [String] = []

    @Option(
        name: .customLong("xcode-certificate"),
        help: "Verify data signed by Xcode's StoreKit testing against this certificate (exported from Xcode); needs --bundle-id.")
    var xcodeCertificate: String?

    @Option(name: .customLong("bundle-id"), help: "Expected bundle ID. Without it, the bundle ID is not checked.")
    var bundleID: String?

    @Option(name: .customLong("app-apple-id"), help: "Expected app Apple ID (checked on production data).")
    var appAppleID: Int64?

    @Option(help: "Expected environment: Sandbox or Production. Without it, the environment is not checked.")
    var environment: String?

    @Option(help: "When to judge certificate validity: signed (the payload's signed date), now, or an ISO-8601 date.")
    var at: String = "signed"

    @Option(help: "What the input is: notification, transaction, renewal-info or app-transaction. Default: judged from the payload.")
    var kind: String?

    @Argument(help: "The JWS, @FILE, or - for standard input.")
    var input: String

    func run() async throws {
        try await reportingFailures {
            // As `token` and `sign` check it: a bundle ID, or a usage mistake (never echoed: it may be a key pasted there).
            if let bundleID, !ServerConfiguration.isBundleId(bundleID) {
                throw CLIError(code: "invalid-option", message: "--bundle-id is not a bundle ID (letters, digits, '-' and '.', like com.example.app)")
            }
            let text = try InputArgument.read(input)
            let verifier = SignedDataVerifier(configuration: try makeConfiguration())
            let report = try await VerificationReport.make(text: text, kind: try resolveKind(text), verifier: verifier)
            try JSONOutput.print(report)
        }
    }

    private func makeConfiguration() throws -> SignedDataVerifier.Configuration {
        if let xcodeCertificate {
            // Validity dates are not judged for Xcode's data, but a mistyped --at is still a mistake.
            _ = try Self.parseValidationTime(at)
            guard let bundleID else { throw CLIError(code: "invalid-option", message: "--xcode-certificate needs --bundle-id (the app under test)") }
            guard roots.isEmpty, environment == nil || environment?.lowercased() == "xcode" else {
                throw CLIError(code: "invalid-option", message: "--xcode-certificate verifies Xcode data only: leave out --root and --environment")
            }
            return try .xcode(bundleID: bundleID, certificate: Self.loadCertificate(xcodeCertificate, role: "Xcode certificate"))
        }
        var configuration = SignedDataVerifier.Configuration.unsafeSkippingClaimChecks(
            trustedRoots: try roots.isEmpty ? [.appleRootCAG3] : roots.map { try Self.loadCertificate($0) }
        )
        configuration.bundleID = bundleID
        configuration.appAppleID = appAppleID
        if let environment {
            guard
                let known = AppStoreEnvironment.knownValues.first(where: {
                    $0.rawValue.caseInsensitiveCompare(environment) == .orderedSame
                })
            else {
                throw CLIError(
                    code: "invalid-option",
                    message: "--environment must be Sandbox or Production, not \(UntrustedText.quoted(environment, limit: 64))")
            }
            configuration.environment = known
        }
        configuration.validationTime = try Self.parseValidationTime(at)
        return configuration
    }

    private func resolveKind(_ text: String) throws -> SignedDataKind {
        if let kind {
            guard let parsed = SignedDataKind(rawValue: kind) else {
                let names = SignedDataKind.allCases.map(\.rawValue).joined(separator: ", ")
                throw CLIError(code: "invalid-option", message: "--kind must be one of \(names), not \(UntrustedText.quoted(kind, limit: 64))")
            }
            return parsed
        }
        guard let apparent = try UnverifiedJWS.unsafeDecode(text).apparentKind else {
            throw CLIError(
                code: VerificationError.Code.malformedPayload.rawValue,
                message: "the payload is not a notification, transaction, renewal info or app transaction; pass --kind"
            )
        }
        return apparent
    }

    static func parseValidationTime(_ text: String) throws -> SignedDataVerifier.ValidationTime {
        switch text.lowercased() {
        case "signed": return .signedDate
        case "now": return .currentTime
        default:
            if let date = try? Date(text, strategy: .iso8601) { return .fixed(date) }
            if let date = try? Date(text + "T00:00:00Z", strategy: .iso8601) { return .fixed(date) }
            throw CLIError(
                code: "invalid-option",
                message: "--at must be 'signed', 'now' or an ISO-8601 date such as 2025-01-02T03:04:05Z, not \(UntrustedText.quoted(text, limit: 64))"
            )
        }
    }

    static func loadCertificate(_ path: String, role: String = "root certificate") throws -> Certificate {
        switch CertificateFile.load(path) {
        case .success(let certificate): return certificate
        case .failure(let problem):
            let code: String
            switch problem {
            case .missing, .unreadable, .directory, .notAFile: code = "unreadable-input"
            case .pemWithoutCertificate, .invalidPEM, .notACertificate: code = "invalid-certificate"
            }
            throw CLIError(code: code, message: "\(role) \(CertificateFile.describe(problem, UntrustedText.quoted(path, limit: 256)))")
        }
    }
}
