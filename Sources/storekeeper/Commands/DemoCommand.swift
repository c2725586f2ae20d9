import AppStoreModels
import AppStoreSigning
import ArgumentParser
import Foundation
import StorekeeperDemo
import X509

/// `storekeeper demo`: Storekeeper's main job with nothing to set up: the simulator and the server in one process,
/// the shipped scenarios played, and Storekeeper's entitlements compared with the simulator's ground truth.
/// `--signed-data` shows only the signed-data layer: signing like the App Store, verifying, refusing forgeries.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the simulator and the server on loopback, play the shipped scenarios, and compare with the ground truth."
    )

    @Flag(name: .customLong("signed-data"), help: "Only sign a lifecycle like the App Store, verify it, and refuse forgeries.")
    var signedDataOnly = false

    func run() async throws {
        if signedDataOnly { return try await runSignedData() }
        let rows = try await DemoRunner(print: { Swift.print($0) }).run()
        let width = max(10, rows.map(\.customerId.count).max() ?? 0)
        print(
            "customer".padding(toLength: width, withPad: " ", startingAt: 0)
                + "  storekeeper                      simulator ground truth           match")
        for row in rows {
            let mine = row.storekeeper.isEmpty ? "(none)" : row.storekeeper.joined(separator: ", ")
            let truth = row.groundTruth.isEmpty ? "(none)" : row.groundTruth.joined(separator: ", ")
            print(
                row.customerId.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                    + mine.padding(toLength: 32, withPad: " ", startingAt: 0) + " "
                    + truth.padding(toLength: 32, withPad: " ", startingAt: 0) + " " + (row.matches ? "✓" : "✗"))
        }
        let mismatches = rows.filter { !$0.matches }.count
        guard mismatches == 0 else {
            print("\n\(mismatches) customer(s) differ from the ground truth")
            throw ExitCode.failure
        }
        print("\nevery customer matches the simulator's ground truth")
    }

    private func runSignedData() async throws {
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
                Step(
                    payload: NotificationPayload(
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
        try add(
            .didFailToRenew, .gracePeriod, .billingGracePeriod, at: failedAt, transaction: renewed,
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
