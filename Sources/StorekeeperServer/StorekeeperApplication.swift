import AppStoreModels
public import AppStoreSigning
public import Foundation
public import Hummingbird
public import Logging
public import StorekeeperCore

/// Storekeeper's HTTP server: the notification webhook, the app API, and operations endpoints.
public enum StorekeeperApplication {
    /// The largest body accepted anywhere: 1 MiB (Apple's notifications are about 15 KB).
    static let maximumBody = 1 << 20

    /// A router with every route.
    public static func buildRouter(
        store: any LedgerStore,
        configuration: ServerConfiguration,
        verifiers: [VerifierKey: SignedDataVerifier],
        logger: Logger,
        metrics: ServerMetrics = ServerMetrics(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: RequestMetricsMiddleware(metrics: metrics))
        NotificationWebhook(store: store, verifiers: verifiers, logger: logger, metrics: metrics).addRoutes(to: router)
        CustomerAPI(store: store, configuration: configuration, verifiers: verifiers, logger: logger, metrics: metrics, now: now)
            .addRoutes(to: router)
        router.get("/metrics") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: metrics.render()))
            )
        }
        router.get("/health") { _, _ -> Response in
            do {
                try await store.checkHealth()
                return jsonResponse(["status": "ok"])
            } catch {
                return jsonResponse(["status": "unavailable", "reason": "\(error)"], status: .serviceUnavailable)
            }
        }
        return router
    }

    /// The application on `host:port` (port 0: any free port).
    public static func build(
        store: any LedgerStore,
        configuration: ServerConfiguration,
        verifiers: [VerifierKey: SignedDataVerifier],
        host: String = "127.0.0.1",
        port: Int,
        logger: Logger,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            router: buildRouter(store: store, configuration: configuration, verifiers: verifiers, logger: logger),
            configuration: .init(address: .hostname(host, port: port), serverName: "Storekeeper"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
            logger: logger
        )
    }

    /// A JSON answer.
    static func jsonResponse(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        let data = (try? AppStoreJSON.makeEncoder().encode(value)) ?? Data("{}".utf8)
        return jsonResponse(encoded: ByteBuffer(bytes: data), status: status)
    }

    /// A JSON answer already encoded.
    static func jsonResponse(encoded body: ByteBuffer, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: body))
    }

    /// `{"error": {"code", "message"}}`.
    static func errorResponse(_ status: HTTPResponse.Status, _ code: String, _ message: String) -> Response {
        struct Body: Encodable { var error: Inner; struct Inner: Encodable { var code: String; var message: String } }
        return jsonResponse(Body(error: .init(code: code, message: message)), status: status)
    }

    /// Reads a body of at most 1 MiB; `nil` when it is larger.
    static func collectBody(_ request: Request) async -> ByteBuffer? {
        try? await request.body.collect(upTo: maximumBody)
    }
}
