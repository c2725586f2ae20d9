import AppStoreModels
package import AppStoreSigning
package import Foundation
package import Logging

/// Takes in one App Store Server Notification, whatever brought it (the webhook, the recovery job, a replay): picks
/// the verifier by the app and environment the payload names (`AppClaims`), verifies everything, applies it to the
/// ledger, or keeps what an auditor needs of it when it is refused (``RefusedNotification``, within the retention
/// bound). Nothing unverified reaches a log unescaped or unbounded, and refusals are logged at a bounded rate.
package struct NotificationIngester: Sendable {
    package let store: any LedgerStore
    package let verifiers: [VerifierKey: SignedDataVerifier]
    /// Refused requests kept in the ledger (the newest).
    package let refusalsKept: Int
    let logger: Logger
    let metrics: StorekeeperMetrics
    let logLimiter: LogRateLimiter
    /// The status the HTTP layer answers a refusal of each kind with, kept with the refusal and logged.
    let refusalStatus: @Sendable (NotificationRefusal.Kind) -> Int

    /// One per application: its refusal log limiter is the one bound on refusal lines.
    package init(
        store: any LedgerStore, verifiers: [VerifierKey: SignedDataVerifier], refusalsKept: Int, logger: Logger,
        metrics: StorekeeperMetrics = .discarded, refusalStatus: @escaping @Sendable (NotificationRefusal.Kind) -> Int
    ) {
        self.store = store
        self.verifiers = verifiers
        self.refusalsKept = refusalsKept
        self.logger = logger
        self.metrics = metrics
        self.logLimiter = LogRateLimiter()
        self.refusalStatus = refusalStatus
    }

    /// What became of a notification.
    package enum Outcome: Sendable {
        /// Verified and stored: applied, a duplicate, or recorded (no purchase data).
        case stored(ApplyOutcome, VerifiedNotification)
        /// Refused; what an auditor needs of it is kept.
        case refused(NotificationRefusal)
        /// Verified, but the ledger could not store it (the sender should retry).
        case storageFailure(VerifiedNotification, StorageError)
    }

    /// Verifies and stores one signed notification payload.
    package func ingest(signedPayload jws: String, receivedAt: Date = Date()) async -> Outcome {
        let verified: VerifiedNotification
        do {
            verified = try await verify(jws)
        } catch {
            await refuse(error, input: Array(jws.utf8), receivedAt: receivedAt)
            return .refused(error)
        }
        let uuid = verified.payload.notificationUUID
        let type = verified.payload.notificationType.rawValue
        do {
            let outcome = try await store.apply(verified)
            metrics.notification(type: type, outcome: outcome.rawValue)
            logger.info(
                "notification \(outcome.rawValue)",
                metadata: [
                    "notification.uuid": .string(uuid), "notification.type": .string(type),
                    "notification.subtype": .string(verified.payload.subtype?.rawValue ?? ""),
                    "transaction.id": .string(verified.transaction?.payload.transactionId ?? ""),
                ]
            )
            return .stored(outcome, verified)
        } catch {
            metrics.notification(type: type, outcome: "storage_failure")
            logger.error("notification not stored", metadata: ["notification.uuid": .string(uuid), "error": .string(error.message)])
            return .storageFailure(verified, error)
        }
    }

    /// Picks the verifier from the payload's own (unverified) app claims and verifies everything with it.
    package func verify(_ jws: String) async throws(NotificationRefusal) -> VerifiedNotification {
        let unverified: UnverifiedSignedData<NotificationPayload>
        do {
            unverified = try UnverifiedJWS.unsafeDecode(jws, as: NotificationPayload.self)
        } catch {
            metrics.verificationFailure(code: error.code.rawValue)
            throw NotificationRefusal(.malformed, code: error.code.rawValue, message: error.message)
        }
        let payload = unverified.payload
        guard let claims = payload.appClaims else {
            let fields = payload.claimFields
            throw NotificationRefusal(
                .malformed, code: VerificationError.Code.malformedPayload.rawValue,
                message: fields.isEmpty
                    ? "notification has none of data, summary, externalPurchaseToken, appData, so its app and environment are unknown"
                    : "notification has \(fields.joined(separator: " and ")); exactly one is allowed",
                payload: payload
            )
        }
        if let malformation = claims.malformation {
            throw NotificationRefusal(.malformed, code: VerificationError.Code.malformedPayload.rawValue, message: malformation, payload: payload)
        }
        guard let bundleId = claims.bundleId, let environment = claims.environment,
            let verifier = verifiers[VerifierKey(bundleId: bundleId, environment: environment)]
        else {
            throw NotificationRefusal(
                .misdirected, code: "unknown-app-or-environment",
                message: "bundle ID \(UntrustedText.quoted(claims.bundleId, limit: 64)) in environment "
                    + "\(UntrustedText.quoted(claims.environment?.rawValue, limit: 64)) is not configured on this server",
                payload: payload
            )
        }
        do {
            // The payload decoded above is the verified one once the signature over its bytes is checked.
            return try await verifier.verifyNotification(unverified)
        } catch {
            metrics.verificationFailure(code: error.code.rawValue)
            let misdirected = [VerificationError.Code.bundleIDMismatch, .appAppleIDMismatch, .environmentMismatch].contains(error.code)
            throw NotificationRefusal(
                misdirected ? .misdirected : .unverifiable, code: error.code.rawValue, message: error.detail, payload: payload)
        }
    }

    /// Counts, logs (bounded) and keeps what an auditor needs of refused input: the signed payload, or the whole body
    /// when it had none. `input` `nil`: nothing was read whole (too large, too slow): counted and logged only.
    package func refuse(_ refusal: NotificationRefusal, input: [UInt8]?, receivedAt: Date = Date()) async {
        metrics.notification(type: "unverified", outcome: "rejected")
        log(refusal, size: input?.count)
        guard let input else { return }
        let record = RefusedNotification(
            input: input, receivedAt: receivedAt, code: refusal.code, message: refusal.message, status: refusalStatus(refusal.kind),
            claims: refusal.payload
        )
        do {
            try await store.recordRefused(record, keeping: refusalsKept)
        } catch {
            logger.error("a refused notification could not be kept for audit", metadata: ["error": .string(error.message)])
        }
    }

    /// One line per refusal, at most ``LogRateLimiter/linesPerWindow`` a minute; every value in it escaped and cut.
    private func log(_ refusal: NotificationRefusal, size: Int?) {
        let (allowed, suppressed) = logLimiter.admit()
        guard allowed else { return }
        var metadata: Logger.Metadata = [
            "refusal.code": .string(UntrustedText.escaped(refusal.code, limit: 64)),
            "refusal.status": .stringConvertible(refusalStatus(refusal.kind)),
        ]
        if let size { metadata["refusal.bytes"] = .stringConvertible(size) }
        if suppressed > 0 { metadata["refusals.not_logged"] = .stringConvertible(suppressed) }
        if let claims = refusal.payload?.appClaims {
            metadata["app.bundle_id"] = .string(UntrustedText.escaped(claims.bundleId ?? "", limit: 64))
            metadata["app.environment"] = .string(UntrustedText.escaped(claims.environment?.rawValue ?? "", limit: 32))
        }
        if refusal.kind == .misdirected {
            logger.error(
                "notification refused: it names an app or environment this server does not accept; check the notification URL in App Store Connect and the configuration",
                metadata: metadata
            )
        } else {
            logger.warning("notification refused", metadata: metadata)
        }
    }
}
