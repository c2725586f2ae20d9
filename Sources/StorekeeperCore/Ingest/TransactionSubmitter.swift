package import AppStoreModels
package import AppStoreSigning
import Foundation
package import Logging

/// Takes in a signed transaction an app submits for one of its customers (what StoreKit 2 gives the app): verifies it
/// with the verifier of the app and environment it names, so that the error reported is that check's, and applies
/// and links it under `Ledger.link(_:to:)`'s rule (a submission never takes a token or a purchase from another
/// customer).
package struct TransactionSubmitter: Sendable {
    package let store: any LedgerStore
    package let verifiers: [VerifierKey: SignedDataVerifier]
    let logger: Logger
    let metrics: StorekeeperMetrics
    /// What a submission of another customer's purchase does (``RestorePolicy``).
    package var restorePolicy: RestorePolicy = .keep

    package init(store: any LedgerStore, verifiers: [VerifierKey: SignedDataVerifier], logger: Logger, metrics: StorekeeperMetrics = .discarded) {
        self.store = store
        self.verifiers = verifiers
        self.logger = logger
        self.metrics = metrics
    }

    /// What became of a submission.
    package enum Outcome: Sendable {
        /// Applied and linked to the customer (or already was): the verified transaction.
        case linked(VerifiedSignedData<TransactionInfo>)
        /// Verified, but its token or its purchase belongs to another customer: nothing changed.
        case refused(OwnershipConflict)
        /// Not verified, or not this caller's to submit.
        case rejected(SubmissionRejection)
        /// The ledger could not store it; the app should retry.
        case storageFailure(StorageError)
    }

    /// Verifies `jws` and links it to `customerId`; `app` is the only app the caller may submit for (`nil`: any).
    package func submit(_ jws: String, customerId: String, forApp app: String?) async -> Outcome {
        let verified: VerifiedSignedData<TransactionInfo>
        do {
            verified = try await verify(jws, forApp: app)
        } catch {
            metrics.verificationFailure(code: error.code)
            return .rejected(error)
        }
        let outcome: SubmissionOutcome
        do {
            outcome = try await store.submit(verified, customerId: customerId, policy: restorePolicy)
        } catch {
            logger.error("transaction not stored", metadata: ["customer.id": .string(customerId), "error": .string(error.message)])
            return .storageFailure(error)
        }
        switch outcome {
        case .refused(let conflict):
            logger.notice(
                "transaction refused: \(conflict.code)",
                metadata: ["transaction.id": .string(verified.payload.transactionId), "customer.id": .string(customerId)]
            )
            return .refused(conflict)
        case .linked:
            logger.info(
                "transaction submitted", metadata: ["transaction.id": .string(verified.payload.transactionId), "customer.id": .string(customerId)])
            return .linked(verified)
        }
    }

    /// Verifies a submitted transaction with the verifier of the app and environment it names (unverified claims pick
    /// the verifier; the verifier checks them): for a caller limited to one app, the transaction must name that app; a
    /// transaction without an environment, or in one the app does not accept, is checked by the app's first verifier
    /// (Production, then Sandbox, then Xcode), which says exactly that.
    package func verify(_ jws: String, forApp app: String?) async throws(SubmissionRejection) -> VerifiedSignedData<TransactionInfo> {
        let unverified: UnverifiedSignedData<TransactionInfo>
        do {
            unverified = try UnverifiedJWS.unsafeDecode(jws, as: TransactionInfo.self)
        } catch {
            throw SubmissionRejection(.malformed, code: error.code.rawValue, message: error.detail)
        }
        let claims = unverified.payload.appClaims
        let bundleId = claims.bundleId ?? ""
        guard AppClaims.isWellFormed(bundleId: bundleId) else {
            throw SubmissionRejection(
                .malformed, code: VerificationError.Code.malformedPayload.rawValue,
                message: "malformed-payload: transaction.bundleId \(UntrustedText.quoted(bundleId, limit: 64)) is not a bundle ID"
            )
        }
        if let app, bundleId != app {
            throw SubmissionRejection(
                .forbidden, code: VerificationError.Code.bundleIDMismatch.rawValue,
                message: "bundle-id-mismatch: transaction.bundleId \(UntrustedText.quoted(bundleId, limit: 64)) is not this API key's app '\(app)'"
            )
        }
        let environments = [AppStoreEnvironment.production, .sandbox, .xcode].filter {
            verifiers[VerifierKey(bundleId: bundleId, environment: $0)] != nil
        }
        guard let first = environments.first else {
            throw SubmissionRejection(
                .forbidden, code: "unknown-app",
                message: "unknown-app: bundle ID \(UntrustedText.quoted(bundleId, limit: 64)) is not configured on this server"
            )
        }
        let environment = claims.environment.flatMap { environments.contains($0) ? $0 : nil } ?? first
        let verifier = verifiers[VerifierKey(bundleId: bundleId, environment: environment)]!
        do {
            return try await verifier.verifyTransaction(unverified)
        } catch {
            let forbidden = [.bundleIDMismatch, .environmentMismatch, .appAppleIDMismatch].contains(error.code)
            throw SubmissionRejection(forbidden ? .forbidden : .malformed, code: error.code.rawValue, message: error.detail)
        }
    }
}
