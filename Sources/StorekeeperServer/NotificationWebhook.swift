import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import Logging
import StorekeeperCore

/// `POST /appstore/notifications`: verify the whole notification (nested data too), apply it in one database
/// transaction, and answer 200 only after the commit. A duplicate is acknowledged; unverifiable or malformed input is
/// refused with 4xx and kept for audit; a storage failure answers 503 so that Apple retries.
struct NotificationWebhook: Sendable {
    let store: any LedgerStore
    let verifiers: [VerifierKey: SignedDataVerifier]
    let logger: Logger
    let metrics: ServerMetrics

    struct Outcome: Encodable { var outcome: String; var notificationUUID: String }

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/appstore/notifications") { request, _ in await receive(request) }
    }

    func receive(_ request: Request) async -> Response {
        guard let buffer = await StorekeeperApplication.collectBody(request) else {
            metrics.recordNotification(type: "unverified", outcome: "rejected")
            return StorekeeperApplication.errorResponse(.contentTooLarge, "body-too-large", "the body is over 1 MiB")
        }
        guard let body = try? JSONDecoder().decode(NotificationRequestBody.self, from: Data(buffer.readableBytesView)) else {
            return await reject(nil, code: "malformed-body", message: #"the body must be JSON {"signedPayload": "<JWS>"}"#)
        }
        guard !body.signedPayload.isEmpty else {
            return await reject(nil, code: "malformed-body", message: "signedPayload is empty")
        }
        // Only the payload is read here, to pick the verifier; the header is left to the verifier's memo.
        let payload: JSONValue
        do {
            payload = try UnverifiedJWS.unsafeDecodePayload(body.signedPayload)
        } catch {
            metrics.recordVerificationFailure(code: error.code.rawValue)
            return await reject(body.signedPayload, code: error.code.rawValue, message: error.message)
        }
        let (bundleId, environment) = Self.claims(payload)
        guard let bundleId, let environment,
            let verifier = verifiers[VerifierKey(bundleId: bundleId, environment: AppStoreEnvironment(rawValue: environment))]
        else {
            logger.error(
                "notification for an app or environment this server does not accept: check the notification URL in App Store Connect and the configuration",
                metadata: ["app.bundle_id": .string(bundleId ?? "?"), "app.environment": .string(environment ?? "?")]
            )
            return await reject(
                body.signedPayload, code: "unknown-app-or-environment",
                message: "bundle ID '\(bundleId ?? "?")' in environment '\(environment ?? "?")' is not configured",
                status: .forbidden
            )
        }
        let verified: VerifiedNotification
        do {
            verified = try await verifier.verifyNotification(body.signedPayload)
        } catch {
            metrics.recordVerificationFailure(code: error.code.rawValue)
            let misdirected = [VerificationError.Code.bundleIDMismatch, .appAppleIDMismatch, .environmentMismatch].contains(error.code)
            if misdirected {
                logger.error("notification refused: \(error.code)", metadata: ["app.bundle_id": .string(bundleId)])
            } else {
                logger.warning("notification refused: \(error.code)", metadata: ["app.bundle_id": .string(bundleId)])
            }
            return await reject(body.signedPayload, code: error.code.rawValue, message: error.description, status: misdirected ? .forbidden : .badRequest)
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

    /// Keeps refused input for audit (when there is any) and answers 4xx.
    private func reject(_ payload: String?, code: String, message: String, status: HTTPResponse.Status = .badRequest) async -> Response {
        metrics.recordNotification(type: "unverified", outcome: "rejected")
        if let payload {
            try? await store.recordRejected(signedPayload: payload, reason: "\(code): \(message)", at: Date())
        }
        return StorekeeperApplication.errorResponse(status, code, message)
    }

    /// Bundle ID and environment from whichever of data, summary, externalPurchaseToken, appData is present.
    static func claims(_ payload: JSONValue) -> (String?, String?) {
        guard case .object(let fields) = payload else { return (nil, nil) }
        for name in ["data", "summary", "appData", "externalPurchaseToken"] {
            guard case .object(let inner) = fields[name] else { continue }
            var bundle: String? = nil
            var environment: String? = nil
            if case .string(let value) = inner["bundleId"] { bundle = value }
            if case .string(let value) = inner["environment"] { environment = value }
            if name == "externalPurchaseToken", case .string(let id) = inner["externalPurchaseId"] {
                environment = id.hasPrefix("SANDBOX") ? "Sandbox" : "Production"
            }
            return (bundle, environment)
        }
        return (nil, nil)
    }
}
