import AppStoreModels
import Crypto
import Foundation
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

@testable import AppStoreSigning

/// Data made by the test CA, broken in one way at a time: each is rejected with its own error code.
@Suite("Verifier: generated cases")
struct GeneratedCaseTests {
    typealias F = SigningFixtures

    private func expectRejection(
        _ code: VerificationError.Code,
        messageContains fragment: String? = nil,
        verifier: SignedDataVerifier = F.verifier(),
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: (SignedDataVerifier) async throws(VerificationError) -> Void
    ) async {
        do {
            try await body(verifier)
            Issue.record("expected \(code), but verification passed", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
            if let fragment {
                #expect(error.message.contains(fragment), "\(error)", sourceLocation: sourceLocation)
            }
        }
    }

    private func transactionJWS(_ transaction: TransactionInfo = F.transaction()) throws -> String {
        try F.signer.sign(transaction)
    }

    // MARK: Positive

    @Test("a chain from the test CA verifies when its root is configured, for every payload kind")
    func positiveAllKinds() async throws {
        let verifier = F.verifier()
        let transaction = try await verifier.verifyTransaction(try transactionJWS())
        #expect(transaction.payload == F.transaction())
        #expect(transaction.uncheckedClaims.isEmpty)
        #expect(transaction.certificatesCheckedAt == F.signedDate)

        let renewal = try await verifier.verifyRenewalInfo(try F.signer.sign(F.renewalInfo()))
        #expect(renewal.payload == F.renewalInfo())

        let app = try await verifier.verifyAppTransaction(try F.signer.sign(F.appTransaction()))
        #expect(app.payload == F.appTransaction())
        #expect(app.certificatesCheckedAtSource.contains("receiptCreationDate"))

        let notification = try await verifier.verifyNotification(try F.notification())
        #expect(notification.payload.notificationType == .didRenew)
        #expect(notification.transaction?.payload == F.transaction())
        #expect(notification.renewalInfo?.payload == F.renewalInfo())
    }

    @Test("production verifies with the app Apple ID and requires it")
    func production() async throws {
        let verifier = F.verifier(environment: .production)
        let jws = try F.notification(environment: .production)
        _ = try await verifier.verifyNotification(jws)
        await expectRejection(.appAppleIDMismatch, messageContains: "missing", verifier: verifier) { v throws(VerificationError) in
            _ = try await v.verifyNotification(try! F.notification(environment: .production, appAppleID: nil))
        }
        #expect(throws: VerificationError.self) {
            _ = try SignedDataVerifier.Configuration(bundleID: F.bundleID, appAppleID: nil, environment: .production)
        }
    }

    @Test("a notification carrying RESCIND_CONSENT appData verifies its nested app transaction")
    func appDataNotification() async throws {
        let payload = NotificationPayload(
            notificationType: .rescindConsent, notificationUUID: UUID().uuidString.lowercased(), signedDate: F.signedDate,
            appData: NotificationAppData(
                appAppleId: F.appAppleID, bundleId: F.bundleID, environment: .sandbox,
                signedAppTransactionInfo: try F.signer.sign(F.appTransaction())
            )
        )
        let verified = try await F.verifier().verifyNotification(try F.signer.sign(payload))
        #expect(verified.appTransaction?.payload == F.appTransaction())
    }

    // MARK: Signature

    @Test("a tampered payload fails the signature check")
    func tamperedPayload() async throws {
        var changed = F.transaction()
        changed.expiresDate = changed.expiresDate?.addingTimeInterval(365 * 86_400)
        let forged = F.replacingSegment(
            1, of: try transactionJWS(),
            with: Base64URL.encode(try AppStoreJSON.makeEncoder().encode(changed))
        )
        await expectRejection(.invalidSignature) { v throws(VerificationError) in _ = try await v.verifyTransaction(forged) }
    }

    @Test("a tampered signature fails the signature check")
    func tamperedSignature() async throws {
        let jws = try transactionJWS()
        var signature = try F.segmentBytes(2, of: jws)
        signature[10] ^= 0x01
        let forged = F.replacingSegment(2, of: jws, with: Base64URL.encode(signature))
        await expectRejection(.invalidSignature) { v throws(VerificationError) in _ = try await v.verifyTransaction(forged) }
    }

    @Test("a truncated signature is malformed", arguments: [63, 40, 1])
    func truncatedSignature(length: Int) async throws {
        let jws = try transactionJWS()
        let signature = try F.segmentBytes(2, of: jws)
        let forged = F.replacingSegment(2, of: jws, with: Base64URL.encode(signature.prefix(length)))
        await expectRejection(.malformedSignature, messageContains: "\(length) bytes") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(forged)
        }
    }

    @Test("a DER-encoded signature is rejected as malformed")
    func derSignature() async throws {
        let jws = try transactionJWS()
        let raw = try F.segmentBytes(2, of: jws)
        let der = try P256.Signing.ECDSASignature(rawRepresentation: raw).derRepresentation
        let forged = F.replacingSegment(2, of: jws, with: Base64URL.encode(der))
        await expectRejection(.malformedSignature, messageContains: "DER") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(forged)
        }
    }

    // MARK: Header

    @Test("alg other than ES256 is rejected", arguments: ["none", "HS256", "ES384", "es256", "RS256"])
    func algorithms(alg: String) async throws {
        let header = JWSHeader(alg: alg, x5c: F.signer.x5c)
        let forged = try F.signer.sign(header: header, payloadBytes: try AppStoreJSON.makeEncoder().encode(F.transaction()))
        await expectRejection(.unsupportedAlgorithm, messageContains: "'\(alg)'") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(forged)
        }
    }

    @Test("x5c must hold exactly 3 certificates", arguments: [1, 2, 4])
    func certificateCount(count: Int) async throws {
        let chain = F.signer.x5c
        let x5c = count == 4 ? chain + [chain[2]] : Array(chain.prefix(count))
        let forged = try F.signer.sign(
            header: JWSHeader(alg: "ES256", x5c: x5c),
            payloadBytes: try AppStoreJSON.makeEncoder().encode(F.transaction())
        )
        await expectRejection(.wrongCertificateCount, messageContains: "holds \(count) certificate") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(forged)
        }
    }

    @Test("a header without x5c is rejected")
    func missingChain() async throws {
        let forged = try F.signer.sign(
            header: JWSHeader(alg: "ES256"), payloadBytes: try AppStoreJSON.makeEncoder().encode(F.transaction())
        )
        await expectRejection(.missingCertificateChain) { v throws(VerificationError) in _ = try await v.verifyTransaction(forged) }
    }

    @Test("a certificate that is not DER is rejected")
    func garbageCertificate() async throws {
        var x5c = F.signer.x5c
        x5c[1] = Data("not a certificate".utf8).base64EncodedString()
        let forged = try F.signer.sign(
            header: JWSHeader(alg: "ES256", x5c: x5c), payloadBytes: try AppStoreJSON.makeEncoder().encode(F.transaction())
        )
        await expectRejection(.malformedCertificate, messageContains: "x5c[1]") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(forged)
        }
    }

    // MARK: Chain

    @Test("a chain to another root is untrusted")
    func untrustedRoot() async throws {
        let other = try TestCertificateAuthority.generate().makeSigner()
        let jws = try other.sign(F.transaction())
        await expectRejection(.untrustedRoot, messageContains: "not a configured trusted root") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
    }

    @Test("a self-made root with Apple's names and OIDs is untrusted by a verifier that trusts Apple's root")
    func imitationOfApple() async throws {
        var options = TestCertificateAuthority.Options()
        options.names = .imitatingApple
        let impostor = try TestCertificateAuthority.generate(options: options).makeSigner()
        let jws = try impostor.sign(F.transaction())
        let appleVerifier = F.verifier(roots: [.appleRootCAG3])
        await expectRejection(.untrustedRoot, messageContains: "Apple Root CA - G3", verifier: appleVerifier) { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
    }

    @Test("a leaf without Apple's receipt-signing OID is rejected")
    func leafWithoutOID() async throws {
        let signer = try F.authority.makeSigner(leaf: .init(hasAppleOID: false))
        let jws = try signer.sign(F.transaction())
        await expectRejection(.leafMissingAppleOID, messageContains: "1.2.840.113635.100.6.11.1") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
    }

    @Test("an intermediate without Apple's WWDR OID is rejected")
    func intermediateWithoutOID() async throws {
        var options = TestCertificateAuthority.Options()
        options.intermediateHasAppleOID = false
        let authority = try TestCertificateAuthority.generate(options: options)
        let jws = try authority.makeSigner().sign(F.transaction())
        await expectRejection(
            .intermediateMissingAppleOID, messageContains: "1.2.840.113635.100.6.2.1",
            verifier: F.verifier(roots: [authority.rootCertificate])
        ) { v throws(VerificationError) in _ = try await v.verifyTransaction(jws) }
    }

    @Test("an intermediate that is not a CA is rejected")
    func intermediateNotCA() async throws {
        var options = TestCertificateAuthority.Options()
        options.intermediateIsCertificateAuthority = false
        let authority = try TestCertificateAuthority.generate(options: options)
        let jws = try authority.makeSigner().sign(F.transaction())
        await expectRejection(.intermediateNotCA, verifier: F.verifier(roots: [authority.rootCertificate])) { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
    }

    @Test("an intermediate from another CA cannot vouch for the leaf")
    func swappedIntermediate() async throws {
        let other = try TestCertificateAuthority.generate()
        var x5c = F.signer.x5c
        x5c[1] = try other.makeSigner().x5c[1]
        let forged = try F.signer.sign(
            header: JWSHeader(alg: "ES256", x5c: x5c), payloadBytes: try AppStoreJSON.makeEncoder().encode(F.transaction())
        )
        await expectRejection(.invalidCertificateChain, messageContains: "not signed by") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(forged)
        }
    }

    @Test("an expired leaf is rejected at the signed date")
    func expiredLeaf() async throws {
        let start = F.signedDate.addingTimeInterval(-30 * 86_400)
        let signer = try F.authority.makeSigner(leaf: .init(validity: start...F.signedDate.addingTimeInterval(-86_400)))
        let jws = try signer.sign(F.transaction())
        await expectRejection(.certificateExpired, messageContains: "leaf certificate") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
    }

    @Test("a leaf that is not yet valid is rejected")
    func notYetValidLeaf() async throws {
        let start = F.signedDate.addingTimeInterval(86_400)
        let signer = try F.authority.makeSigner(leaf: .init(validity: start...start.addingTimeInterval(86_400)))
        let jws = try signer.sign(F.transaction())
        await expectRejection(.certificateNotYetValid, messageContains: "not valid before") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
    }

    // MARK: Claims

    @Test("a wrong bundle ID is rejected")
    func wrongBundleID() async throws {
        let jws = try F.signer.sign(F.transaction(bundleID: "com.attacker.app"))
        await expectRejection(.bundleIDMismatch, messageContains: "com.attacker.app") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
        let notification = try F.notification(
            bundleID: "com.attacker.app", transaction: F.transaction(bundleID: "com.attacker.app")
        )
        await expectRejection(.bundleIDMismatch, messageContains: "data.bundleId") { v throws(VerificationError) in
            _ = try await v.verifyNotification(notification)
        }
    }

    @Test("a wrong app Apple ID is rejected")
    func wrongAppAppleID() async throws {
        let jws = try F.notification(appAppleID: 999)
        await expectRejection(.appAppleIDMismatch, messageContains: "999") { v throws(VerificationError) in
            _ = try await v.verifyNotification(jws)
        }
        var app = F.appTransaction()
        app.appAppleId = 999
        let appJWS = try F.signer.sign(app)
        await expectRejection(.appAppleIDMismatch) { v throws(VerificationError) in _ = try await v.verifyAppTransaction(appJWS) }
    }

    @Test("a wrong environment is rejected, for every payload kind")
    func wrongEnvironment() async throws {
        let production = F.verifier(environment: .production)
        let transaction = try F.signer.sign(F.transaction(environment: .sandbox))
        await expectRejection(.environmentMismatch, messageContains: "'Sandbox'", verifier: production) { v throws(VerificationError) in
            _ = try await v.verifyTransaction(transaction)
        }
        let renewal = try F.signer.sign(F.renewalInfo(environment: .sandbox))
        await expectRejection(.environmentMismatch, verifier: production) { v throws(VerificationError) in
            _ = try await v.verifyRenewalInfo(renewal)
        }
        let notification = try F.notification(environment: .sandbox)
        await expectRejection(.environmentMismatch, verifier: production) { v throws(VerificationError) in
            _ = try await v.verifyNotification(notification)
        }
        let app = try F.signer.sign(F.appTransaction(environment: .xcode))
        await expectRejection(.environmentMismatch, messageContains: "receiptType") { v throws(VerificationError) in
            _ = try await v.verifyAppTransaction(app)
        }
    }

    @Test("nested data is verified: a tampered nested transaction fails, naming where")
    func tamperedNestedTransaction() async throws {
        let good = try F.signer.sign(F.transaction())
        var changed = F.transaction()
        changed.productId = "pro.lifetime"
        let tampered = F.replacingSegment(1, of: good, with: Base64URL.encode(try AppStoreJSON.makeEncoder().encode(changed)))
        let data = NotificationData(
            bundleId: F.bundleID, environment: .sandbox, signedTransactionInfo: tampered, status: .active
        )
        let jws = try F.signer.sign(NotificationPayload(notificationType: .didRenew, notificationUUID: "u1", signedDate: F.signedDate, data: data))
        do {
            _ = try await F.verifier().verifyNotification(jws)
            Issue.record("a tampered nested transaction verified")
        } catch {
            #expect(error.code == .invalidSignature)
            #expect(error.location == "data.signedTransactionInfo")
            #expect(error.description.hasPrefix("invalid-signature: data.signedTransactionInfo: "))
        }
    }

    @Test("nested data must belong to the notification's app and subscription")
    func nestedMismatch() async throws {
        var renewal = F.renewalInfo()
        renewal.originalTransactionId = "9999"
        let jws = try F.notification(renewal: renewal)
        await expectRejection(.nestedDataMismatch, messageContains: "originalTransactionId") { v throws(VerificationError) in
            _ = try await v.verifyNotification(jws)
        }
        let unchecked = F.verifier(configure: { $0.bundleID = nil })
        let otherApp = try F.notification(transaction: F.transaction(bundleID: "com.other"))
        await expectRejection(.nestedDataMismatch, messageContains: "com.other", verifier: unchecked) { v throws(VerificationError) in
            _ = try await v.verifyNotification(otherApp)
        }
    }

    // MARK: Input shape

    @Test("a payload that is not JSON is rejected")
    func nonJSONPayload() async throws {
        let jws = try F.signer.sign(payloadBytes: Array("this is not json".utf8))
        await expectRejection(.malformedPayload, messageContains: "not valid JSON") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(jws)
        }
        let missing = try F.signer.sign(payloadBytes: Array(#"{"transactionId":"1"}"#.utf8))
        await expectRejection(.malformedPayload, messageContains: "missing required field") { v throws(VerificationError) in
            _ = try await v.verifyTransaction(missing)
        }
    }

    @Test("input over 1 MiB is rejected before parsing", arguments: [5 << 20, (1 << 20) + 1])
    func hugeInput(size: Int) async throws {
        let huge = String(repeating: "A", count: size)
        await expectRejection(.inputTooLarge, messageContains: "\(size) bytes") { v throws(VerificationError) in
            _ = try await v.verifyNotification(huge)
        }
    }

    /// A well-formed 64-byte signature segment, so each shape case below has exactly one fault.
    static let signature64 = String(repeating: "A", count: 86)

    @Test(
        "shape and base64url errors",
        arguments: [
            ("onlyone", VerificationError.Code.malformedJWS),
            ("a.b", .malformedJWS),
            ("a.b.c.d", .malformedJWS),
            ("..", .malformedJWS),
            ("eyJhbGciOiJFUzI1NiJ9..\(signature64)", .malformedJWS),
            ("eyJhbGciOiJFUzI1NiJ9.e30=.\(signature64)", .invalidBase64URL),
            ("eyJhbGciOiJFUzI1NiJ9.e3 0.\(signature64)", .invalidBase64URL),
            ("e.e30.\(signature64)", .invalidBase64URL),
            ("eyJhbGciOiJFUzI1NiJ9.e30.\(signature64)=", .invalidBase64URL),
            ("eyJhbGciOiJFUzI1NiJ9.e31.\(signature64)", .invalidBase64URL),
        ])
    func shapes(input: String, code: VerificationError.Code) async {
        await expectRejection(code) { v throws(VerificationError) in _ = try await v.verifyTransaction(input) }
    }

    @Test("a header that is not a JSON object is rejected")
    func headerNotJSON() async {
        let jws = Base64URL.encode(Array("[1,2]".utf8)) + ".e30." + Base64URL.encode([UInt8](repeating: 1, count: 64))
        await expectRejection(.malformedHeader) { v throws(VerificationError) in _ = try await v.verifyTransaction(jws) }
    }
}
