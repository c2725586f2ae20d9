import AppStoreModels
import Foundation
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

@testable import AppStoreSigning

/// Apple's real signed data: every valid sample verifies at its signed date; checked now, the expired leaves
/// fail as expired; every invalid sample is rejected.
@Suite("Conformance corpus: real Apple-signed data")
struct ConformanceTests {
    /// Samples without a signedDate or environment (early 2021-2022 data), handled as DESIGN notes in the README.
    static let undated = ["notification-DID_RENEW-sandbox-01.jws"]
    static let withoutEnvironment = ["transaction-autorenew-noenv-01.jws", "renewalinfo-noenv-01.jws"]

    static func verifier(
        environment: AppStoreEnvironment? = nil,
        at time: SignedDataVerifier.ValidationTime = .signedDate
    ) -> SignedDataVerifier {
        var configuration = SignedDataVerifier.Configuration.unsafeSkippingClaimChecks()
        configuration.environment = environment
        configuration.validationTime = time
        return SignedDataVerifier(configuration: configuration)
    }

    /// Verifies a sample according to its kind, returning the payload's signedDate.
    @discardableResult
    static func verify(_ sample: ConformanceCorpus.Sample, with verifier: SignedDataVerifier) async throws(VerificationError) -> Date? {
        switch sample.kind {
        case "notification":
            let verified = try await verifier.verifyNotification(sample.jws)
            if verified.payload.data?.signedTransactionInfo != nil {
                #expect(verified.transaction != nil)
            }
            if verified.payload.data?.signedRenewalInfo != nil {
                #expect(verified.renewalInfo != nil)
            }
            return verified.payload.signedDate
        case "transaction":
            return try await verifier.verifyTransaction(sample.jws).payload.signedDate
        case "renewalinfo":
            return try await verifier.verifyRenewalInfo(sample.jws).payload.signedDate
        default:
            return try await verifier.verifyTransaction(sample.jws).payload.signedDate
        }
    }

    @Test(
        "valid samples verify against Apple Root CA - G3 at their signed date",
        arguments: ConformanceCorpus.valid.filter { !undated.contains($0.file) })
    func validAtSignedDate(sample: ConformanceCorpus.Sample) async throws {
        let verifier = Self.verifier()
        let signedDate = try await Self.verify(sample, with: verifier)
        #expect(signedDate != nil)
    }

    @Test(
        "valid samples with an environment verify when that environment is required",
        arguments: ConformanceCorpus.valid.filter { !undated.contains($0.file) && !withoutEnvironment.contains($0.file) })
    func validWithEnvironment(sample: ConformanceCorpus.Sample) async throws {
        let verifier = Self.verifier(environment: AppStoreEnvironment(rawValue: sample.environment))
        try await Self.verify(sample, with: verifier)
    }

    @Test(
        "checked at the current time, samples signed by expired leaves fail as expired",
        arguments: ConformanceCorpus.valid)
    func validAtNow(sample: ConformanceCorpus.Sample) async throws {
        let verifier = Self.verifier(at: .currentTime)
        // Leaves in the corpus expire 2023-09-24, 2025-10-11 or 2027-10-13; find this sample's leaf.
        let leaf = try leafCertificateNotAfter(sample.jws)
        if leaf < Date() {
            let error = await #expect(throws: VerificationError.self) {
                try await Self.verify(sample, with: verifier)
            }
            #expect(error?.code == .certificateExpired)
            #expect(error?.message.contains("expired at") == true)
        } else {
            try await Self.verify(sample, with: verifier)
        }
    }

    @Test("invalid samples are rejected", arguments: ConformanceCorpus.invalid)
    func invalidRejected(sample: ConformanceCorpus.Sample) async throws {
        let verifier = Self.verifier()
        let error = await #expect(throws: VerificationError.self) {
            try await Self.verify(sample, with: verifier)
        }
        let expected: [String: VerificationError.Code] = [
            "negative-truncated-signature-wild-01.jws": .malformedSignature,
            "negative-tampered-payload-01.jws": .invalidSignature,
            "negative-signature-swapped-01.jws": .invalidSignature,
            "negative-leaf-swapped-01.jws": .invalidSignature,
            "negative-truncated-empty-signature-01.jws": .malformedJWS,
            "negative-truncated-payload-01.jws": .malformedJWS,
        ]
        #expect(error?.code == expected[sample.file], "\(error.map(String.init(describing:)) ?? "no error")")
    }

    @Test("a sample without signedDate is judged at the current time, and verifies at a date given explicitly")
    func undatedSample() async throws {
        let sample = try #require(ConformanceCorpus.samples.first { $0.file == Self.undated[0] })
        let error = await #expect(throws: VerificationError.self) {
            try await Self.verify(sample, with: Self.verifier())
        }
        #expect(error?.code == .certificateExpired)
        #expect(error?.message.contains("no signedDate") == true)

        // Its nested renewal info is dated 2022-03-04; the leaf was valid then.
        let fixed = Self.verifier(at: .fixed(Date(epochMilliseconds: 1_646_387_008_228)))
        try await Self.verify(sample, with: fixed)
    }

    @Test(
        "samples without environment verify without an environment check and fail with one",
        arguments: withoutEnvironment)
    func samplesWithoutEnvironment(file: String) async throws {
        let sample = try #require(ConformanceCorpus.samples.first { $0.file == file })
        try await Self.verify(sample, with: Self.verifier())
        for environment in [AppStoreEnvironment.sandbox, .production] {
            let error = await #expect(throws: VerificationError.self) {
                try await Self.verify(sample, with: Self.verifier(environment: environment))
            }
            #expect(error?.code == .environmentMismatch)
            #expect(error?.message.contains("missing") == true)
        }
    }

    @Test("the bundled root is byte-identical to ../shared/data/AppleRootCA-G3.cer, with Apple's fingerprint")
    func bundledRoot() throws {
        let shared = try Data(contentsOf: SharedCorpus.directory.appendingPathComponent("data/AppleRootCA-G3.cer"))
        #expect(Array(shared) == Certificate.appleRootCAG3DER)
        #expect(
            CertificateChain.fingerprint(Certificate.appleRootCAG3DER)
                == "63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79"
        )
    }

    /// The leaf's notAfter, read without verifying anything.
    private func leafCertificateNotAfter(_ jws: String) throws -> Date {
        let parsed = try CompactJWS(parsing: jws)
        let header = try JSONDecoder().decode(JWSHeader.self, from: Data(try parsed.headerBytes()))
        let first = try #require(header.x5c?.first)
        let der = try #require(Data(base64Encoded: first))
        return try Certificate(derEncoded: Array(der)).notValidAfter
    }

    @Test("a malformed x5c certificate is named without the parser's source file and line")
    func malformedCertificateMessage() async throws {
        func segment(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_")
        }
        let jws =
            segment(#"{"alg":"ES256","x5c":["MIIBAAAA","AAAA","AAAA"]}"#) + "." + segment(#"{"transactionId":"1"}"#) + "."
            + String(repeating: "A", count: 86)
        do {
            _ = try await Self.verifier().verifyTransaction(jws)
            Issue.record("verified")
        } catch {
            #expect(error.code == .malformedCertificate, "\(error)")
            #expect(!error.message.contains(".swift:") && error.message.contains("x5c[0] (leaf)"), "\(error.message)")
        }
    }
}
