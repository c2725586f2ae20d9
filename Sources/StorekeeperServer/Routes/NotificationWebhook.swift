import AppStoreModels
package import AppStoreSigning
import Foundation
import HTTPTypes
import Hummingbird
package import Logging
package import StorekeeperCore
import StorekeeperHTTP

/// `POST /appstore/notifications`: reads the body, hands the signed payload to the ``NotificationIngester`` (verify
/// everything, apply in one database transaction, or keep what an auditor needs of a refusal) and answers 200 only
/// after the commit. Refusals answer 400 (malformed, unverifiable), 403 (an app or environment this server does not
/// serve), 408/413 (a body too slow or too large); a storage failure 503, so that Apple retries.
struct NotificationWebhook: Sendable {
    let ingester: NotificationIngester
    /// Where verified notifications are forwarded too, if anywhere.
    var relay: NotificationRelay?

    struct Outcome: Encodable {
        var outcome: String
        var notificationUUID: String
    }

    /// Where Apple posts notifications.
    static let path = "/appstore/notifications"

    func addRoutes(to router: Router<StorekeeperRequestContext>) {
        router.post(RouterPath(Self.path)) { request, _ in try await receive(request) }
    }

    func receive(_ request: Request) async throws -> Response {
        let body: ByteBuffer
        do {
            body = try await StorekeeperApplication.readBody(request)
        } catch {
            // Not kept: nothing was read whole (too large, too slow, or not HTTP).
            await ingester.refuse(
                NotificationRefusal(.unreadable(status: Int(error.status.code)), code: error.code.rawValue, message: error.message), input: nil)
            throw error
        }
        let bytes = Array(body.readableBytesView)
        guard let envelope = try? NotificationRequestBody(json: bytes), !envelope.signedPayload.isEmpty else {
            let refusal = NotificationRefusal(
                .malformed, code: APIError.Code.malformedBody.rawValue,
                message: #"the body must be JSON {"signedPayload": "<JWS>"} with a non-empty JWS"#
            )
            await ingester.refuse(refusal, input: bytes)
            throw Self.error(refusal)
        }
        switch await ingester.ingest(signedPayload: envelope.signedPayload) {
        case .stored(let outcome, let verified):
            if let relay, request.headers[HTTPField.Name(NotificationRelay.relayedHeader)!] == nil { relay.enqueue(bytes) }
            return StorekeeperApplication.jsonResponse(Outcome(outcome: outcome.rawValue, notificationUUID: verified.payload.notificationUUID))
        case .refused(let refusal):
            throw Self.error(refusal)
        case .storageFailure:
            throw APIError(.serviceUnavailable, .storageUnavailable, "the notification could not be stored; retry later")
        }
    }

    static func error(_ refusal: NotificationRefusal) -> APIError {
        APIError(.init(code: refusal.kind.httpStatus), .init(rawValue: refusal.code), refusal.message)
    }
}

extension NotificationRefusal.Kind {
    /// The status the webhook answers: 400 malformed or unverifiable, 403 misdirected (an app or environment this
    /// server does not serve), and an unreadable request's own (413 too large, 408 too slow).
    package var httpStatus: Int {
        switch self {
        case .malformed, .unverifiable: 400
        case .misdirected: 403
        case .unreadable(let status): status
        }
    }
}

extension NotificationIngester {
    /// The application's ingester: refusals kept (``ServerConfiguration/refusedNotificationsKept``) with the status
    /// the webhook answers them with.
    package init(
        store: any LedgerStore, verifiers: [VerifierKey: SignedDataVerifier], configuration: ServerConfiguration, logger: Logger,
        metrics: StorekeeperMetrics = .discarded
    ) {
        self.init(
            store: store, verifiers: verifiers, refusalsKept: configuration.refusedNotificationsKept, logger: logger, metrics: metrics,
            refusalStatus: { $0.httpStatus }
        )
    }
}
