import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
import X509

/// `storekeeper bench verify`: verifications per second, on one core, of the same notification measured four
/// ways in one run, so the ratios are meaningful on any machine; and decodes per second of its nested payloads.
package enum VerifyBenchmark {
    /// One run's figures. Rates are operations per second.
    package struct Result: Codable, Sendable {
        package var benchmark = "verify"
        /// Seconds spent on each measurement.
        package var secondsPerMeasurement: Double
        /// Size of the notification JWS measured.
        package var notificationBytes: Int
        /// Outer notification JWS, chain cache warm: one ECDSA verification plus decoding and claim checks.
        package var outerNotificationWarmCache: Double
        /// Outer notification JWS with the cache off: full chain validation every time.
        package var outerNotificationNoCache: Double
        /// The whole notification with its nested transaction and renewal info (three JWS), cache warm.
        package var fullNotificationWarmCache: Double
        /// One raw P-256 ECDSA verification (swift-crypto) of the same signing input and signature.
        package var rawP256Verify: Double
        /// outerNotificationWarmCache / rawP256Verify; the target is at least 0.6.
        package var warmCacheToRawRatio: Double
        /// The notification's transaction and renewal info payloads (their JSON, as a ledger stores them) decoded by
        /// Foundation's `JSONDecoder`, pairs per second: what a read would cost without the hand-written decoders.
        package var storedPayloadPairDecodeJSONDecoder: Double
        /// The same pairs decoded by `TransactionInfo(json:fallback:)` and `RenewalInfo(json:fallback:)`, as reads do now.
        package var storedPayloadPairDecodeFast: Double
        /// How the test data was signed.
        package var data: String
    }

    /// Runs the four measurements for `seconds` each.
    package static func run(seconds: Double) async throws -> Result {
        let workload = try Workload()
        let warm = workload.verifier(cache: .default)
        let cold = workload.verifier(cache: .disabled)
        let jws = workload.notification

        // Check once that every path really verifies before timing anything.
        _ = try await warm.verifyNotification(jws)
        _ = try await cold.verifyNotificationEnvelope(jws)
        guard workload.rawVerify() else { throw BenchmarkError(message: "raw verification of the test data failed") }

        let raw = try await measure(seconds: seconds) { workload.rawVerify() }
        let outerWarm = try await measure(seconds: seconds) {
            (try? await warm.verifyNotificationEnvelope(jws)) != nil
        }
        let outerCold = try await measure(seconds: seconds) {
            (try? await cold.verifyNotificationEnvelope(jws)) != nil
        }
        let full = try await measure(seconds: seconds) {
            (try? await warm.verifyNotification(jws)) != nil
        }
        let decoder = AppStoreJSON.makeDecoder()
        let (transaction, renewal) = (workload.transactionJSON, workload.renewalJSON)
        let decoded = try (TransactionInfo(json: transaction, fallback: decoder), RenewalInfo(json: renewal, fallback: decoder))
        guard try decoded == (decoder.decode(TransactionInfo.self, from: transaction), decoder.decode(RenewalInfo.self, from: renewal)) else {
            throw BenchmarkError(message: "the fast decoders disagree with JSONDecoder on the test data")
        }
        let slowDecode = try await measure(seconds: seconds) {
            (try? (decoder.decode(TransactionInfo.self, from: transaction), decoder.decode(RenewalInfo.self, from: renewal))) != nil
        }
        let fastDecode = try await measure(seconds: seconds) {
            (try? (TransactionInfo(json: transaction, fallback: decoder), RenewalInfo(json: renewal, fallback: decoder))) != nil
        }
        return Result(
            secondsPerMeasurement: seconds,
            notificationBytes: jws.utf8.count,
            outerNotificationWarmCache: outerWarm,
            outerNotificationNoCache: outerCold,
            fullNotificationWarmCache: full,
            rawP256Verify: raw,
            warmCacheToRawRatio: (outerWarm / raw * 1000).rounded() / 1000,
            storedPayloadPairDecodeJSONDecoder: slowDecode,
            storedPayloadPairDecodeFast: fastDecode,
            data:
                "DID_RENEW notification with nested transaction and renewal info, signed by a test CA shaped like Apple's (P-384 root and intermediate, P-256 leaf)"
        )
    }

    /// Calls `operation` repeatedly for `seconds` and returns calls per second. Every call must succeed.
    static func measure(seconds: Double, _ operation: () async -> Bool) async throws -> Double {
        let clock = ContinuousClock()
        for _ in 0..<50 {
            guard await operation() else { throw BenchmarkError(message: "a verification failed during warm-up") }
        }
        let limit = Duration.milliseconds(Int64(seconds * 1000))
        let start = clock.now
        var count = 0
        var elapsed = Duration.zero
        repeat {
            for _ in 0..<32 {
                guard await operation() else { throw BenchmarkError(message: "a verification failed while measuring") }
            }
            count += 32
            elapsed = clock.now - start
        } while elapsed < limit
        let seconds = elapsed / .seconds(1)
        return (Double(count) / seconds).rounded()
    }

    /// A failed benchmark.
    package struct BenchmarkError: Error, CustomStringConvertible {
        package var message: String
        package var description: String { message }
    }
}

/// The data every measurement uses.
struct Workload {
    let authority: TestCertificateAuthority
    let notification: String
    let signingInput: Data
    let signature: P256.Signing.ECDSASignature
    let leafKey: P256.Signing.PublicKey
    /// The nested transaction's and renewal info's payload JSON.
    let transactionJSON: Data, renewalJSON: Data
    static let bundleID = "com.example.storekeeper.bench"

    init() throws {
        authority = try TestCertificateAuthority.generate()
        let signer = try authority.makeSigner()
        let now = Date()
        var transaction = TransactionInfo(
            transactionId: "2000001024998954", originalTransactionId: "2000001024993299", bundleId: Self.bundleID,
            productId: "com.example.pro.monthly", purchaseDate: now.addingTimeInterval(-60), type: .autoRenewable
        )
        transaction.webOrderLineItemId = "2000000113755461"
        transaction.subscriptionGroupIdentifier = "21752814"
        transaction.originalPurchaseDate = now.addingTimeInterval(-40 * 86_400)
        transaction.expiresDate = now.addingTimeInterval(30 * 86_400)
        transaction.quantity = 1
        transaction.inAppOwnershipType = .purchased
        transaction.signedDate = now
        transaction.environment = .sandbox
        transaction.transactionReason = .renewal
        transaction.storefront = "AUS"
        transaction.storefrontId = "143460"
        transaction.price = 1990
        transaction.currency = "AUD"
        transaction.appTransactionId = "704897469903383919"
        var renewal = RenewalInfo(originalTransactionId: transaction.originalTransactionId)
        renewal.productId = transaction.productId
        renewal.autoRenewProductId = transaction.productId
        renewal.autoRenewStatus = .on
        renewal.signedDate = now
        renewal.environment = .sandbox
        renewal.recentSubscriptionStartDate = transaction.originalPurchaseDate
        renewal.renewalDate = transaction.expiresDate
        renewal.renewalPrice = 1990
        renewal.currency = "AUD"
        renewal.appTransactionId = transaction.appTransactionId
        let payload = NotificationPayload(
            notificationType: .didRenew, notificationUUID: UUID().uuidString.lowercased(), signedDate: now,
            data: NotificationData(
                bundleId: Self.bundleID, bundleVersion: "637", environment: .sandbox,
                signedTransactionInfo: try signer.sign(transaction), signedRenewalInfo: try signer.sign(renewal),
                status: .active
            )
        )
        notification = try signer.sign(payload)
        let encoder = AppStoreJSON.makeEncoder()
        (transactionJSON, renewalJSON) = (try encoder.encode(transaction), try encoder.encode(renewal))
        let parts = notification.split(separator: ".")
        signingInput = Data("\(parts[0]).\(parts[1])".utf8)
        var base64 = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        signature = try P256.Signing.ECDSASignature(rawRepresentation: Data(base64Encoded: base64)!)
        guard let key = P256.Signing.PublicKey(signer.certificateChain[0].publicKey) else {
            throw VerifyBenchmark.BenchmarkError(message: "the test leaf has no P-256 key")
        }
        leafKey = key
    }

    func verifier(cache: ChainCachePolicy) -> SignedDataVerifier {
        // The bundle ID is not empty and the environment is sandbox, so this cannot throw.
        var configuration = try! SignedDataVerifier.Configuration(
            bundleID: Self.bundleID, appAppleID: nil, environment: .sandbox,
            trustedRoots: [authority.rootCertificate]
        )
        configuration.chainCache = cache
        return SignedDataVerifier(configuration: configuration)
    }

    func rawVerify() -> Bool {
        leafKey.isValidSignature(signature, for: signingInput)
    }
}
