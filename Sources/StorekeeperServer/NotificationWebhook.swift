import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import Logging
import StorekeeperCore

/// `POST /appstore/notifications`: verify the whole notification (nested data too), apply it in one database
/// transaction, and answer 200 only after the commit. A duplicate is acknowledged; unverifiable or malformed input is
/// refused with 4xx, and what an auditor needs of it is kept (``RefusedNotification``, within the retention bound);
/// a storage failure answers 503 so that Apple retries.
///
/// Nothing unverified reaches a log unescaped or unbounded, and refusals are logged at a bounded rate
/// (``LogRateLimiter``): a notification whose claims do not even name an app and environment is `malformed` (400, a
/// warning); a well-formed one for an app or environment this server does not serve is a misconfiguration (403, an
/// error: check the notification URL in App Store Connect and the configuration).
struct NotificationWebhook: Sendable {
    let store: any LedgerStore
    let verifiers: [VerifierKey: SignedDataVerifier]
    let logger: Logger
    let metrics: ServerMetrics
    /// Refused requests kept in the ledger.
    let refusalsKept: Int
    let logLimiter = LogRateLimiter()

    struct Outcome: Encodable { var outcome: String; var notificationUUID: String }

    /// One refused request: the answer, how loud to log it, and the decoded (unverified) payload if there was one.
    struct Refusal: Error {
        var status: HTTPResponse.Status = .badRequest
        var code: String
        var message: String
        /// A misconfiguration (error) rather than bad input (warning).
        var misconfiguration = false
        var payload: NotificationPayload? = nil
    }

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/appstore/notifications") { request, _ in await receive(request) }
    }

    func receive(_ request: Request) async -> Response {
        let body: ByteBuffer
        switch await StorekeeperApplication.readBody(request) {
        case .success(let buffer): body = buffer
        case .failure(let refusal):
            // Not kept: nothing was read whole (too large, too slow, or not HTTP).
            metrics.recordNotification(type: "unverified", outcome: "rejected")
            log(Refusal(status: refusal.status, code: refusal.code, message: refusal.message), size: nil)
            return refusal.response
        }
        let bytes = Array(body.readableBytesView)
        guard let envelope = try? JSONDecoder().decode(NotificationRequestBody.self, from: Data(bytes)), !envelope.signedPayload.isEmpty else {
            let refusal = Refusal(code: "malformed-body", message: #"the body must be JSON {"signedPayload": "<JWS>"} with a non-empty JWS"#)
            return await refuse(refusal, input: bytes)
        }
        let jws = envelope.signedPayload
        let verified: VerifiedNotification
        do {
            verified = try await verify(jws)
        } catch {
            return await refuse(error, input: Array(jws.utf8))
        }
        let uuid = verified.payload.notificationUUID
        do {
            let outcome = try await store.apply(verified)
            metrics.recordNotification(type: verified.payload.notificationType.rawValue, outcome: outcome.rawValue)
            logger.info(
                "notification \(outcome.rawValue)",
                metadata: [
                    "notification.uuid": .string(uuid), "notification.type": .string(verified.payload.notificationType.rawValue),
                    "notification.subtype": .string(verified.payload.subtype?.rawValue ?? ""),
                    "transaction.id": .string(verified.transaction?.payload.transactionId ?? ""),
                ]
            )
            return StorekeeperApplication.jsonResponse(Outcome(outcome: outcome.rawValue, notificationUUID: uuid))
        } catch {
            metrics.recordNotification(type: verified.payload.notificationType.rawValue, outcome: "storage_failure")
            logger.error("notification not stored; Apple will retry", metadata: ["notification.uuid": .string(uuid), "error": .string(error.message)])
            return StorekeeperApplication.errorResponse(.serviceUnavailable, "storage-unavailable", "the notification could not be stored; retry later")
        }
    }

    /// Picks the verifier from the payload's own (unverified) app claims and verifies everything with it.
    func verify(_ jws: String) async throws(Refusal) -> VerifiedNotification {
        let payload: NotificationPayload
        do {
            payload = try UnverifiedJWS.unsafeDecodePayload(jws, as: NotificationPayload.self)
        } catch {
            metrics.recordVerificationFailure(code: error.code.rawValue)
            throw Refusal(code: error.code.rawValue, message: error.message)
        }
        guard let claims = payload.appClaims else {
            let fields = payload.claimFields
            throw Refusal(
                code: VerificationError.Code.malformedPayload.rawValue,
                message: fields.isEmpty
                    ? "notification has none of data, summary, externalPurchaseToken, appData, so its app and environment are unknown"
                    : "notification has \(fields.joined(separator: " and ")); exactly one is allowed",
                payload: payload
            )
        }
        if let malformation = claims.malformation {
            throw Refusal(code: VerificationError.Code.malformedPayload.rawValue, message: malformation, payload: payload)
        }
        guard let bundleId = claims.bundleId, let environment = claims.environment,
            let verifier = verifiers[VerifierKey(bundleId: bundleId, environment: environment)]
        else {
            throw Refusal(
                status: .forbidden, code: "unknown-app-or-environment",
                message: "bundle ID \(UntrustedText.quoted(claims.bundleId, limit: 64)) in environment "
                    + "\(UntrustedText.quoted(claims.environment?.rawValue, limit: 64)) is not configured on this server",
                misconfiguration: true, payload: payload
            )
        }
        do {
            return try await verifier.verifyNotification(jws)
        } catch {
            metrics.recordVerificationFailure(code: error.code.rawValue)
            let misdirected = [VerificationError.Code.bundleIDMismatch, .appAppleIDMismatch, .environmentMismatch].contains(error.code)
            throw Refusal(
                status: misdirected ? .forbidden : .badRequest, code: error.code.rawValue, message: error.description,
                misconfiguration: misdirected, payload: payload
            )
        }
    }

    /// Keeps what an auditor needs of a refused request, logs it (bounded), and answers 4xx.
    private func refuse(_ refusal: Refusal, input: [UInt8]) async -> Response {
        metrics.recordNotification(type: "unverified", outcome: "rejected")
        log(refusal, size: input.count)
        let record = RefusedNotification(
            input: input, receivedAt: Date(), code: refusal.code, message: refusal.message, status: Int(refusal.status.code),
            claims: refusal.payload
        )
        do {
            try await store.recordRefused(record, keeping: refusalsKept)
        } catch {
            logger.error("a refused notification could not be kept for audit", metadata: ["error": .string(error.message)])
        }
        return StorekeeperApplication.errorResponse(refusal.status, refusal.code, refusal.message)
    }

    /// One line per refusal, at most ``LogRateLimiter/linesPerWindow`` a minute; every value in it escaped and cut.
    private func log(_ refusal: Refusal, size: Int?) {
        let (allowed, suppressed) = logLimiter.admit()
        guard allowed else { return }
        var metadata: Logger.Metadata = [
            "refusal.code": .string(UntrustedText.escaped(refusal.code, limit: 64)),
            "refusal.status": .stringConvertible(refusal.status.code),
        ]
        if let size { metadata["refusal.bytes"] = .stringConvertible(size) }
        if suppressed > 0 { metadata["refusals.not_logged"] = .stringConvertible(suppressed) }
        if let claims = refusal.payload?.appClaims {
            metadata["app.bundle_id"] = .string(UntrustedText.escaped(claims.bundleId ?? "", limit: 64))
            metadata["app.environment"] = .string(UntrustedText.escaped(claims.environment?.rawValue ?? "", limit: 32))
        }
        if refusal.misconfiguration {
            logger.error(
                "notification refused: it names an app or environment this server does not accept; check the notification URL in App Store Connect and the configuration",
                metadata: metadata
            )
        } else {
            logger.warning("notification refused", metadata: metadata)
        }
    }
}
