import AppStoreModels
import Crypto
import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreSigning

/// The routed entry points: a JWS whose payload was decoded, unverified, to choose its app's verifier
/// (``UnverifiedJWS/unsafeDecode(_:as:)``) is verified without decoding its payload again. They must give every input
/// the verdict the text entry points give it.
@Suite("Verifier: routed entry points (payload decoded once)")
struct RoutedVerificationTests {
    typealias F = SigningFixtures

    /// What a verification ended in: the payload's signed date, or the error's code.
    enum Verdict: Equatable { case verified(Date?), refused(VerificationError.Code) }

    static func verdict(_ body: () async throws(VerificationError) -> Date?) async -> Verdict {
        do { return .verified(try await body()) } catch { return .refused(error.code) }
    }

    static func textVerdict(_ jws: String, notification: Bool, _ verifier: SignedDataVerifier) async -> Verdict {
        await verdict { () async throws(VerificationError) in
            notification
                ? try await verifier.verifyNotification(jws).payload.signedDate
                : try await verifier.verifyTransaction(jws).payload.signedDate
        }
    }

    /// `nil` when the routing decode itself refuses the input (the text entry point must then refuse it too).
    static func routedVerdict(_ jws: String, notification: Bool, _ verifier: SignedDataVerifier) async -> Verdict? {
        do {
            if notification {
                let unverified = try UnverifiedJWS.unsafeDecode(jws, as: NotificationPayload.self)
                return await verdict { () async throws(VerificationError) in try await verifier.verifyNotification(unverified).payload.signedDate }
            }
            let unverified = try UnverifiedJWS.unsafeDecode(jws, as: TransactionInfo.self)
            return await verdict { () async throws(VerificationError) in try await verifier.verifyTransaction(unverified).payload.signedDate }
        } catch {
            return nil
        }
    }

    @Test(
        "every real Apple sample, valid or tampered, gets the same verdict routed as from its text",
        arguments: ConformanceCorpus.samples.filter { ["notification", "transaction"].contains($0.kind) || $0.expected == "invalid" })
    func corpus(sample: ConformanceCorpus.Sample) async throws {
        let notification = sample.kind == "notification"
        let text = await Self.textVerdict(sample.jws, notification: notification, ConformanceTests.verifier())
        guard let routed = await Self.routedVerdict(sample.jws, notification: notification, ConformanceTests.verifier()) else {
            guard case .refused = text else {
                Issue.record("routing refused \(sample.file), which verifies from its text")
                return
            }
            return
        }
        #expect(routed == text)
        if sample.expected == "valid", !ConformanceTests.undated.contains(sample.file) {
            guard case .verified(let date) = routed else {
                Issue.record("\(sample.file) refused routed: \(routed)")
                return
            }
            #expect(date != nil)
        }
    }

    @Test("a routed notification verifies with the payload and nested data the text entry point gives")
    func sameResult() async throws {
        let jws = try F.notification()
        let verifier = F.verifier()
        let routed = try await verifier.verifyNotification(try UnverifiedJWS.unsafeDecode(jws, as: NotificationPayload.self))
        let text = try await verifier.verifyNotification(jws)
        #expect(routed.payload == text.payload)
        #expect(routed.notification.jws == jws)
        #expect(routed.transaction?.payload == F.transaction())
        #expect(routed.renewalInfo?.payload == F.renewalInfo())
        let transaction = try await verifier.verifyTransaction(
            try UnverifiedJWS.unsafeDecode(try F.signer.sign(F.transaction()), as: TransactionInfo.self))
        #expect(transaction.payload == F.transaction())
    }

    @Test("a payload changed after signing is refused routed: the decoded payload is trusted only with its signature")
    func tamperedPayload() async throws {
        var changed = F.transaction()
        changed.expiresDate = changed.expiresDate?.addingTimeInterval(365 * 86_400)
        let forged = F.replacingSegment(
            1, of: try F.signer.sign(F.transaction()), with: Base64URL.encode(try AppStoreJSON.makeEncoder().encode(changed)))
        let unverified = try UnverifiedJWS.unsafeDecode(forged, as: TransactionInfo.self)
        #expect(unverified.payload.expiresDate == changed.expiresDate)
        let error = await #expect(throws: VerificationError.self) { try await F.verifier().verifyTransaction(unverified) }
        #expect(error?.code == .invalidSignature)

        let notification = try F.notification()
        let payload = try UnverifiedJWS.unsafeDecodePayload(notification, as: NotificationPayload.self)
        var forgedPayload = payload
        forgedPayload.notificationType = .refund
        let forgedNotification = F.replacingSegment(1, of: notification, with: Base64URL.encode(try AppStoreJSON.makeEncoder().encode(forgedPayload)))
        let refused = await #expect(throws: VerificationError.self) {
            try await F.verifier().verifyNotification(try UnverifiedJWS.unsafeDecode(forgedNotification, as: NotificationPayload.self))
        }
        #expect(refused?.code == .invalidSignature)
    }

    @Test("routing accepts a signature of any length; the routed verifier refuses one that is not 64 bytes", arguments: [63, 1])
    func signatureLength(length: Int) async throws {
        let jws = try F.signer.sign(F.transaction())
        let forged = F.replacingSegment(2, of: jws, with: Base64URL.encode(try F.segmentBytes(2, of: jws).prefix(length)))
        let unverified = try UnverifiedJWS.unsafeDecode(forged, as: TransactionInfo.self)
        let error = await #expect(throws: VerificationError.self) { try await F.verifier().verifyTransaction(unverified) }
        #expect(error?.code == .malformedSignature)
        #expect(error?.message.contains("\(length) bytes") == true)
    }
}
