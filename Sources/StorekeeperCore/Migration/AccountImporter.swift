import AppStoreModels
package import AppStoreServerAPI
package import AppStoreSigning
import Foundation
package import Logging

/// Brings one customer's purchases into the ledger from the App Store, given one transaction ID of their Apple
/// account (what an app receipt, or an older backend's database, holds): Get All Subscription Statuses and Get
/// Transaction History (every page) for it, everything verified, applied under the ledger's rules (older data never
/// overwrites newer), and each purchase (original transaction ID) linked to the customer under a submission's rule:
/// a purchase, or an app account token, of another customer is refused (or moved, by the ``RestorePolicy``). One
/// transaction ID is enough: the history holds the account's every purchase of the app. Running it again changes
/// nothing.
package struct AccountImporter: Sendable {
    package let app: VerifierKey
    let client: AppStoreServerAPIClient
    let verifier: SignedDataVerifier
    let store: any LedgerStore
    package var restorePolicy: RestorePolicy = .keep
    let logger: Logger

    package init(app: VerifierKey, client: AppStoreServerAPIClient, verifier: SignedDataVerifier, store: any LedgerStore, logger: Logger) {
        self.app = app
        self.client = client
        self.verifier = verifier
        self.store = store
        self.logger = logger
    }

    /// What an import did.
    package struct Report: Codable, Sendable, Hashable {
        /// The transaction ID asked with.
        package var transactionId: String
        /// The purchases (original transaction IDs) of the account in the app and environment, now the customer's.
        package var linked: [String]
        /// How many of `linked` were not linked to the customer before.
        package var newlyLinked: Int
        /// The purchases that stay another customer's, and why.
        package var refused: [Refusal]
        /// Transactions the App Store returned.
        package var transactions: Int
        /// Records of the ledger that changed (0 when everything was known).
        package var recordsChanged: Int
        /// App Store Server API calls made.
        package var requests: Int
    }

    /// A purchase not linked to the customer.
    package struct Refusal: Codable, Sendable, Hashable {
        package var originalTransactionId: String
        package var code: String
        package var message: String
    }

    /// Why an import did not run to its end: the App Store (an unknown transaction ID, a refused key, a failure), or
    /// the ledger. What was applied before stays applied; running it again finishes it.
    package enum Failure: Error, Sendable, CustomStringConvertible {
        case appStore(AppStoreServerAPIError)
        case storage(StorageError)

        package var description: String {
            switch self {
            case .appStore(let error): "the App Store: \(error)"
            case .storage(let error): "the ledger: \(error.message)"
            }
        }

        /// Whether the App Store said it does not know the transaction ID (Apple's 4040010, or the transaction of
        /// another app or environment).
        package var isUnknownTransaction: Bool {
            guard case .appStore(let error) = self else { return false }
            return error.httpStatus == 404 || error.errorCode == 4_040_010
        }
    }

    /// Imports the account of `transactionId` for `customerId`.
    package func importCustomer(_ customerId: String, transactionId: String) async throws(Failure) -> Report {
        let snapshot: AppStoreSnapshot
        let requests: Int
        do {
            (snapshot, requests) = try await AppStoreSnapshot.fetch(account: transactionId, client: client, verifier: verifier)
        } catch {
            throw .appStore(error)
        }
        // Applied only where the ledger differs (each status is signed again on every call: applying it anyway would
        // count a change that is none).
        var changed = 0
        let ledger: Ledger
        do {
            let families = snapshot.families.filter { $0.environment == app.environment }
            ledger = try await store.ledger(families: families.sorted())
            if !Drift.between(ledger, and: snapshot).isEmpty { changed = try await store.applySnapshot(snapshot) }
        } catch {
            throw .storage(error)
        }
        // One transaction per purchase, the latest signed, links it (and its subscription) to the customer.
        var latest: [String: VerifiedSignedData<TransactionInfo>] = [:]
        for verified in snapshot.transactions + snapshot.subscriptions.map(\.transaction) where verified.payload.environment == app.environment {
            let original = verified.payload.originalTransactionId
            if let known = latest[original], (known.payload.signedDate ?? .distantPast) >= (verified.payload.signedDate ?? .distantPast) { continue }
            latest[original] = verified
        }
        var report = Report(
            transactionId: transactionId, linked: [], newlyLinked: 0, refused: [], transactions: snapshot.transactions.count, recordsChanged: changed,
            requests: requests)
        for (original, verified) in latest.sorted(by: { $0.key < $1.key }) {
            do {
                switch try await store.submit(verified, customerId: customerId, policy: restorePolicy) {
                case .linked:
                    report.linked.append(original)
                    if ledger.explicitLinks[LedgerKey(app.environment, original)] != customerId { report.newlyLinked += 1 }
                case .refused(let conflict):
                    report.refused.append(Refusal(originalTransactionId: original, code: conflict.code, message: conflict.message))
                }
            } catch {
                throw .storage(error)
            }
        }
        logger.info(
            "account imported",
            metadata: [
                "app.bundle_id": .string(app.bundleId), "customer.id": .string(customerId), "transaction.id": .string(transactionId),
                "import.linked": .stringConvertible(report.linked.count), "import.refused": .stringConvertible(report.refused.count),
                "import.records_changed": .stringConvertible(changed),
            ])
        return report
    }
}
