import AppStoreModels
import Crypto
import Foundation
import StorekeeperTesting
import X509

@testable import AppStoreSigning

/// Test data signed by a fresh test CA, and verifiers that trust it.
enum SigningFixtures {
    static let bundleID = "com.example.storekeeper"
    static let appAppleID: Int64 = 1_234_567_890
    static let signedDate = Date(epochMilliseconds: Int64(Date().timeIntervalSince1970 * 1000) - 60_000)

    /// One CA for the whole test run (making one costs a few milliseconds).
    static let authority: TestCertificateAuthority = try! TestCertificateAuthority.generate()
    static let signer: JWSSigner = try! authority.makeSigner()

    static func verifier(
        environment: AppStoreEnvironment = .sandbox,
        appAppleID: Int64? = appAppleID,
        roots: [Certificate] = [authority.rootCertificate],
        cache: ChainCachePolicy = .default,
        clock: (@Sendable () -> ContinuousClock.Instant)? = nil,
        configure: (inout SignedDataVerifier.Configuration) -> Void = { _ in }
    ) -> SignedDataVerifier {
        var configuration = try! SignedDataVerifier.Configuration(
            bundleID: bundleID, appAppleID: appAppleID, environment: environment, trustedRoots: roots
        )
        configuration.chainCache = cache
        configure(&configuration)
        if let clock { return SignedDataVerifier(configuration: configuration, clock: clock) }
        return SignedDataVerifier(configuration: configuration)
    }

    static func transaction(
        id: String = "2000000000000001",
        bundleID: String = bundleID,
        environment: AppStoreEnvironment = .sandbox
    ) -> TransactionInfo {
        var transaction = TransactionInfo(
            transactionId: id, originalTransactionId: "2000000000000001", bundleId: bundleID,
            productId: "pro.monthly", purchaseDate: signedDate.addingTimeInterval(-3600), type: .autoRenewable
        )
        transaction.webOrderLineItemId = "2000000000000002"
        transaction.subscriptionGroupIdentifier = "21000000"
        transaction.originalPurchaseDate = transaction.purchaseDate
        transaction.expiresDate = signedDate.addingTimeInterval(30 * 86_400)
        transaction.quantity = 1
        transaction.appAccountToken = LowercaseUUID(uuidString: "7a0ac2a4-3d9b-4d3c-9e55-0f2a8f0d7c11")
        transaction.inAppOwnershipType = .purchased
        transaction.signedDate = signedDate
        transaction.environment = environment
        transaction.storefront = "USA"
        transaction.storefrontId = "143441"
        transaction.transactionReason = .purchase
        transaction.price = 9990
        transaction.currency = "USD"
        return transaction
    }

    static func renewalInfo(environment: AppStoreEnvironment = .sandbox) -> RenewalInfo {
        var renewal = RenewalInfo(originalTransactionId: "2000000000000001")
        renewal.productId = "pro.monthly"
        renewal.autoRenewProductId = "pro.monthly"
        renewal.autoRenewStatus = .on
        renewal.signedDate = signedDate
        renewal.environment = environment
        renewal.renewalDate = signedDate.addingTimeInterval(30 * 86_400)
        renewal.renewalPrice = 9990
        renewal.currency = "USD"
        return renewal
    }

    static func appTransaction(environment: AppStoreEnvironment = .sandbox) -> AppTransaction {
        var app = AppTransaction(bundleId: bundleID)
        app.receiptType = environment
        app.appAppleId = appAppleID
        app.applicationVersion = "1"
        app.receiptCreationDate = signedDate
        app.originalPurchaseDate = signedDate.addingTimeInterval(-86_400)
        app.originalApplicationVersion = "1"
        app.appTransactionId = "704000000000000001"
        app.originalPlatform = .iOS
        return app
    }

    /// A DID_RENEW notification with a signed transaction and renewal info.
    static func notification(
        signer: JWSSigner = signer,
        environment: AppStoreEnvironment = .sandbox,
        bundleID: String = bundleID,
        appAppleID: Int64? = appAppleID,
        transaction: TransactionInfo? = nil,
        renewal: RenewalInfo? = nil
    ) throws -> String {
        let data = NotificationData(
            appAppleId: appAppleID, bundleId: bundleID, bundleVersion: "42", environment: environment,
            signedTransactionInfo: try signer.sign(transaction ?? self.transaction(environment: environment)),
            signedRenewalInfo: try signer.sign(renewal ?? renewalInfo(environment: environment)),
            status: .active
        )
        return try signer.sign(
            NotificationPayload(
                notificationType: .didRenew, notificationUUID: UUID().uuidString.lowercased(),
                signedDate: signedDate, data: data
            )
        )
    }

    /// Replaces one dot-separated segment of a JWS.
    static func replacingSegment(_ index: Int, of jws: String, with segment: String) -> String {
        var parts = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        parts[index] = segment
        return parts.joined(separator: ".")
    }

    static func segmentBytes(_ index: Int, of jws: String) throws -> [UInt8] {
        let segment = jws.split(separator: ".", omittingEmptySubsequences: false)[index]
        return try Base64URL.decode(segment.utf8)
    }
}
