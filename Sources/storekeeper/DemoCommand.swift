import AppStoreModels
import AppStoreSigning
import ArgumentParser
import Foundation
import X509

/// `storekeeper demo`: what Storekeeper can do today, with nothing to set up.
///
/// This release has the signed-data layer: it signs a subscriber's lifecycle the way the App Store does (with a
/// fresh Apple-shaped test CA), verifies every notification and its nested data as a server would, and shows that
/// forged and misdirected data is refused. The simulator and server join the demo in later releases.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Sign a subscription lifecycle like the App Store, verify it like the server, and reject forgeries."
    )

    func run() async throws {
        let authority = try TestCertificateAuthority.generate()
        let signer = try authority.makeSigner()
        let bundleID = "com.example.storekeeper.demo"
        let configuration = try SignedDataVerifier.Configuration(
            bundleID: bundleID, appAppleID: 6_450_000_001, environment: .sandbox,
            trustedRoots: [authority.rootCertificate]
        )
        let verifier = SignedDataVerifier(configuration: configuration)
        let lifecycle = try DemoLifecycle(bundleID: bundleID, start: Date(), signer: signer)

        print("Storekeeper demo: signed data, verified end to end")
        print("test CA root: \(authority.rootCertificate.subject)\n")
        print("timeline (each notification signed like the App Store, then verified with its nested data):")
        var failures = 0
        for step in lifecycle.steps {
            let jws = try signer.sign(step.payload)
            do {
                let verified = try await verifier.verifyNotification(jws)
                let transaction = verified.transaction?.payload
                let renewal = verified.renewalInfo?.payload
                let subtype = verified.payload.subtype.map { "/\($0)" } ?? ""
                let status = verified.payload.data?.status.map { "status \($0)" } ?? ""
                let expiry = transaction?.expiresDate.map { "expires \($0.formatted(.iso8601))" } ?? ""
                let renew = renewal?.autoRenewStatus.map { "auto-renew \($0 == .on ? "on" : "off")" } ?? ""
                let fields = [status, expiry, renew].filter { !$0.isEmpty }.joined(separator: ", ")
                print("  ✓ \(verified.payload.notificationType)\(subtype)  \(transaction?.productId ?? "")  \(fields)")
            } catch {
                failures += 1
                print("  ✗ \(step.payload.notificationType): \(error)")
            }
        }

        print("\nforgeries and mistakes (each must be refused):")
        let genuine = try signer.sign(lifecycle.steps[0].payload)
        let impostor = try TestCertificateAuthority.generate().makeSigner()
        var otherApp = lifecycle.steps[0].payload
        otherApp.data?.bundleId = "com.attacker.app"
        let cases: [(String, String)] = [
            ("payload edited after signing", Self.tamper(genuine)),
            ("signed by a look-alike CA", try impostor.sign(lifecycle.steps[0].payload)),
            ("another app's notification", try signer.sign(otherApp)),
            ("not a JWS at all", "hello"),
        ]
        for (name, jws) in cases {
            do {
                _ = try await verifier.verifyNotification(jws)
                failures += 1
                print("  ✗ \(name): ACCEPTED")
            } catch {
                print("  ✓ \(name): refused, \(error.code)")
            }
        }
        let statistics = verifier.chainCacheStatistics
        print("\nchain cache: \(statistics.insertions) chain validated in full, \(statistics.hits) verifications reused it")
        guard failures == 0 else {
            print("\n\(failures) check(s) failed")
            throw ExitCode.failure
        }
        print("\nall checks passed")
    }

    /// Moves the payload's first digit, keeping the header and signature.
    private static func tamper(_ jws: String) -> String {
        let parts = jws.split(separator: ".").map(String.init)
        var payload = Array(parts[1])
        payload[payload.count / 2] = payload[payload.count / 2] == "A" ? "B" : "A"
        return [parts[0], String(payload), parts[2]].joined(separator: ".")
    }
}

/// A monthly subscriber, signed with `signer`: subscribes, renews, fails billing into grace, recovers, turns
/// auto-renew off, expires.
struct DemoLifecycle {
    struct Step {
        var payload: NotificationPayload
    }

    let steps: [Step]

    init(bundleID: String, start: Date, signer: JWSSigner) throws {
        let month: TimeInterval = 30 * 86_400
        let original = "2000000000000100"
        var steps: [Step] = []
        var period = 0
        func transaction(_ id: Int, at date: Date, reason: TransactionReason) -> TransactionInfo {
            var transaction = TransactionInfo(
                transactionId: String(Int(original)! + id), originalTransactionId: original, bundleId: bundleID,
                productId: "pro.monthly", purchaseDate: date, type: .autoRenewable
            )
            transaction.expiresDate = date.addingTimeInterval(month)
            transaction.originalPurchaseDate = start
            transaction.subscriptionGroupIdentifier = "21000001"
            transaction.transactionReason = reason
            transaction.environment = .sandbox
            transaction.inAppOwnershipType = .purchased
            transaction.price = 4990
            transaction.currency = "USD"
            transaction.signedDate = date
            return transaction
        }
        func add(
            _ type: NotificationType, _ subtype: NotificationSubtype?, _ status: SubscriptionStatus, at date: Date,
            transaction: TransactionInfo, autoRenew: AutoRenewStatus = .on, grace: Date? = nil
        ) throws {
            var renewal = RenewalInfo(originalTransactionId: original)
            renewal.productId = "pro.monthly"
            renewal.autoRenewProductId = "pro.monthly"
            renewal.autoRenewStatus = autoRenew
            renewal.isInBillingRetryPeriod = grace != nil
            renewal.gracePeriodExpiresDate = grace
            renewal.environment = .sandbox
            renewal.signedDate = date
            let data = NotificationData(
                bundleId: bundleID, bundleVersion: "1", environment: .sandbox,
                signedTransactionInfo: try signer.sign(transaction), signedRenewalInfo: try signer.sign(renewal),
                status: status
            )
            steps.append(
                Step(payload: NotificationPayload(
                    notificationType: type, subtype: subtype, notificationUUID: UUID().uuidString.lowercased(),
                    signedDate: date, data: data
                ))
            )
        }
        let first = transaction(period, at: start, reason: .purchase)
        try add(.subscribed, .initialBuy, .active, at: start, transaction: first)
        period += 1
        let renewed = transaction(period, at: start.addingTimeInterval(month), reason: .renewal)
        try add(.didRenew, nil, .active, at: renewed.purchaseDate, transaction: renewed)
        let failedAt = start.addingTimeInterval(2 * month)
        try add(.didFailToRenew, .gracePeriod, .billingGracePeriod, at: failedAt, transaction: renewed,
            grace: failedAt.addingTimeInterval(16 * 86_400))
        period += 1
        let recovered = transaction(period, at: failedAt.addingTimeInterval(3 * 86_400), reason: .renewal)
        try add(.didRenew, .billingRecovery, .active, at: recovered.purchaseDate, transaction: recovered)
        let cancelAt = recovered.purchaseDate.addingTimeInterval(86_400)
        try add(.didChangeRenewalStatus, .autoRenewDisabled, .active, at: cancelAt, transaction: recovered, autoRenew: .off)
        try add(.expired, .voluntary, .expired, at: recovered.expiresDate!, transaction: recovered, autoRenew: .off)
        self.steps = steps
    }
}
