import AppStoreModels
package import AppStoreServerAPI
package import AppStoreSigning
package import Foundation
package import Hummingbird
import HummingbirdCore
package import Logging
import NIOCore
package import ServiceLifecycle
package import StorekeeperCore
import StorekeeperHTTP

#if canImport(Glibc)
import Glibc
#endif

/// Storekeeper's HTTP server: the notification webhook, the app API, and operations endpoints; one builder for
/// `storekeeper serve`, the demo, the benchmarks and the tests.
package enum StorekeeperApplication {
    /// The largest body accepted anywhere: 1 MiB (Apple's notifications are about 15 KB).
    static let maximumBody = 1 << 20

    /// A router with every route, each a thin adapter over one use case of `StorekeeperCore`.
    package static func buildRouter(
        store: any LedgerStore,
        configuration: ServerConfiguration,
        verifiers: [VerifierKey: SignedDataVerifier],
        logger: Logger,
        exporter: MetricsExporter = MetricsExporter(),
        now: @escaping @Sendable () -> Date = { Date() },
        apiClients: [VerifierKey: AppStoreServerAPIClient] = [:],
        credentialCheck: CredentialCheckService? = nil,
        ingester: NotificationIngester? = nil,
        relay: NotificationRelay? = nil,
        imports: ImportRegistry? = nil
    ) -> Router<StorekeeperRequestContext> {
        let metrics = exporter.metrics
        // The outbox decides customers' states with the server's rules and clock.
        store.outbox.configure(entitlements: configuration.entitlements, clock: now)
        let router = Router(context: StorekeeperRequestContext.self)
        router.add(middleware: RequestMetricsMiddleware(metrics: metrics))
        router.add(middleware: BodyLimitMiddleware())
        router.add(middleware: UnmatchedRouteMiddleware())
        let ingester =
            ingester
            ?? NotificationIngester(
                store: store, verifiers: verifiers, configuration: configuration, logger: logger, metrics: metrics
            )
        NotificationWebhook(ingester: ingester, relay: relay).addRoutes(to: router)
        let reader = CustomerReader(
            store: store, configuration: configuration.entitlements, cache: configuration.makeCustomerCache(of: ByteBuffer.self),
            logger: logger, metrics: metrics, render: { $0.json() }
        )
        let v1 = router.group("/v1").add(middleware: APIKeyAuthenticator(configuration: configuration))
        CustomerAPI(
            configuration: configuration,
            submitter: {
                var submitter = TransactionSubmitter(store: store, verifiers: verifiers, logger: logger, metrics: metrics)
                submitter.restorePolicy = configuration.restorePolicy
                return submitter
            }(),
            reader: reader, now: now
        ).addRoutes(to: v1)
        let importers = configuration.makeImporters(store: store, clients: apiClients, verifiers: verifiers, logger: logger)
        let receiptVerifiers = (try? configuration.makeReceiptVerifiers()) ?? [:]
        ReceiptMigrationAPI(
            configuration: configuration, receiptVerifiers: receiptVerifiers, importers: importers, reader: reader, now: now
        ).addRoutes(to: v1)
        ImportsAPI(
            configuration: configuration, importers: importers, receiptVerifiers: receiptVerifiers, imports: imports ?? ImportRegistry()
        ).addRoutes(to: v1)
        OfferAPI(configuration: configuration, keys: (try? configuration.makeOfferKeys()) ?? [:], store: store, now: now).addRoutes(to: v1)
        EventsAPI(configuration: configuration, store: store, logger: logger).addRoutes(to: v1)
        WebhookAdminAPI(configuration: configuration, store: store).addRoutes(to: v1)
        var reconcilers: [VerifierKey: Reconciler] = [:]
        for (app, client) in apiClients {
            guard let verifier = verifiers[app] else { continue }
            reconcilers[app] = Reconciler(app: app, client: client, verifier: verifier, store: store, logger: logger)
        }
        AdminAPI(reconcilers: reconcilers, apps: configuration.apps.map(\.bundleId)).addRoutes(to: v1)
        let support = router.group("/v1/support").add(
            middleware: APIKeyAuthenticator(configuration: configuration, scopes: [.support, .admin], routes: "the support API"))
        var appStore: [VerifierKey: AppStoreAccess] = [:]
        for (app, client) in apiClients {
            guard let verifier = verifiers[app] else { continue }
            appStore[app] = .init(client: client, verifier: verifier)
        }
        let supportAPI = SupportAPI(configuration: configuration, store: store, reader: reader, now: now, appStore: appStore, logger: logger)
        supportAPI.addRoutes(to: support)
        do {
            try Dashboard(support: supportAPI, logger: logger).addRoutes(to: router)
        } catch {
            // The templates are built into the binary: one that does not parse is a build defect, found by any test.
            logger.critical("the dashboard's templates do not parse; the dashboard is off", metadata: ["error": .string("\(error)")])
        }
        let metricsAnswer: @Sendable () -> Response = {
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: exporter.render()))
            )
        }
        let healthAnswer: @Sendable () async -> Response = {
            do {
                try await store.checkHealth()
                // A cache that may miss other instances' writes is off until it hears them again (PostgreSQL).
                var body: [String: JSONValue] = [
                    "status": .string("ok"), "database": .string(store.databaseKind), "answerCache": .string(store.changes.isComplete ? "on" : "off"),
                ]
                // Informative only: the webhook and reads work whatever the App Store says of the credentials.
                if let credentialCheck { body["appStoreCredentials"] = .object(credentialCheck.summary.mapValues { .string($0) }) }
                return jsonResponse(body)
            } catch {
                return jsonResponse(
                    ["status": "unavailable", "database": store.databaseKind, "reason": "\(error)"], status: .serviceUnavailable
                )
            }
        }
        // The OpenAPI 3.1 document of the routes above (Resources/openapi.json, kept true by OpenAPIDocumentTests).
        let openAPI: @Sendable () -> Response = {
            Response(
                status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: PackageResources.openapi_json)))
        }
        router.get("/openapi.json") { _, _ in openAPI() }
        router.head("/openapi.json") { _, _ in withoutBody(openAPI()) }
        router.get("/metrics") { _, _ in metricsAnswer() }
        router.get("/health") { _, _ in await healthAnswer() }
        // HEAD, as some monitoring probes ask: the same status and headers, no body.
        router.head("/metrics") { _, _ in withoutBody(metricsAnswer()) }
        router.head("/health") { _, _ in withoutBody(await healthAnswer()) }
        return router
    }

    /// A HEAD request's answer: the GET answer's status and headers (its `Content-Length` too, as RFC 9110 asks),
    /// without its body.
    static func withoutBody(_ response: Response) -> Response {
        response.createHeadResponse()
    }

    /// The application on `host:port` (port 0: any free port): every route, the connection limits and timeouts of
    /// ``ServerConfiguration/http``, the retention job when ``ServerConfiguration/RetentionSettings/rawPayloadDays``
    /// is set, the notification recovery job for each app and environment with an API client (unless
    /// ``ServerConfiguration/recovery`` turns it off), and `services`, all in the application's service group with
    /// graceful shutdown. With `ownsStore`, the store is a service of the group too (``LedgerStoreService``): closed
    /// last, then `afterStoreClosed` runs.
    package static func buildApplication(
        store: any LedgerStore,
        configuration: ServerConfiguration,
        verifiers: [VerifierKey: SignedDataVerifier],
        host: String = "127.0.0.1",
        port: Int,
        logger: Logger,
        exporter: MetricsExporter = MetricsExporter(),
        now: @escaping @Sendable () -> Date = { Date() },
        apiClients: [VerifierKey: AppStoreServerAPIClient] = [:],
        services extraServices: [any Service] = [],
        ownsStore: Bool = false,
        afterStoreClosed: @escaping @Sendable () async -> Void = {},
        checkCredentialsAtStart: Bool = false,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        // The store first: the service group stops it last, after the server and every job (``LedgerStoreService``).
        var services: [any Service] = ownsStore ? [LedgerStoreService(store: store, afterClose: afterStoreClosed)] : []
        services += extraServices
        // One ingester for the webhook and the recovery job: one bound on refusal log lines.
        let ingester = NotificationIngester(
            store: store, verifiers: verifiers, configuration: configuration, logger: logger, metrics: exporter.metrics
        )
        let credentialCheck =
            checkCredentialsAtStart && !apiClients.isEmpty
            ? CredentialCheckService(clients: apiClients, logger: logger, metrics: exporter.metrics) : nil
        if let credentialCheck { services.append(credentialCheck) }
        if let days = configuration.retention.rawPayloadDays {
            services.append(RetentionService(store: store, rawPayloadDays: days, leaseDuration: configuration.jobLeaseDuration, logger: logger))
        }
        services.append(
            OutboxService(
                store: store, settings: configuration.events, endpoints: configuration.webhooks.map(\.name),
                leaseDuration: configuration.jobLeaseDuration, logger: logger, metrics: exporter.metrics
            ))
        services.append(
            ConsumptionService(
                store: store, configuration: configuration, verifiers: verifiers, clients: apiClients, now: now, logger: logger,
                metrics: exporter.metrics))
        let relay = configuration.relay.map { NotificationRelay(settings: $0, logger: logger, metrics: exporter.metrics) }
        if let relay { services.append(relay) }
        // Stopped before the store: an import stopped by a shutdown ends its last write first.
        let imports = ImportRegistry()
        services.append(imports)
        if !configuration.webhooks.isEmpty {
            services.append(WebhookDeliveryService(store: store, endpoints: configuration.webhooks, logger: logger, metrics: exporter.metrics))
        }
        if configuration.recovery.enabled, !apiClients.isEmpty {
            let settings = configuration.recovery.settings
            let recoveries = apiClients.sorted { $0.key.description < $1.key.description }.map { app, client in
                NotificationRecovery(
                    app: app, client: client, ingester: ingester, settings: settings, logger: logger, metrics: exporter.metrics, now: now)
            }
            services.append(
                NotificationRecoveryService(recoveries: recoveries, store: store, leaseDuration: configuration.jobLeaseDuration, logger: logger))
        }
        return Application(
            router: buildRouter(
                store: store, configuration: configuration, verifiers: verifiers, logger: logger, exporter: exporter, now: now,
                apiClients: apiClients,
                credentialCheck: credentialCheck, ingester: ingester, relay: relay, imports: imports
            ),
            server: .guardedHTTP1(limits: configuration.http),
            configuration: .init(
                address: .hostname(host, port: port), serverName: "Storekeeper",
                availableConnectionsDelegate: MaximumAvailableConnections(effectiveMaxConnections(configuration.http, logger: logger))
            ),
            services: services,
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
            logger: logger
        )
    }

    /// The connection cap: the configured one, lowered to the open-file limit less 64 (kept for the database, the
    /// listening socket and outgoing connections) when that is smaller, with a warning saying so.
    static func effectiveMaxConnections(_ limits: HTTPLimits, logger: Logger) -> Int {
        var limit = rlimit()
        #if canImport(Glibc)
        let status = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        #else
        let status = getrlimit(RLIMIT_NOFILE, &limit)
        #endif
        guard status == 0, limit.rlim_cur != rlim_t.max else { return limits.maxConnections }
        let available = max(1, Int(clamping: limit.rlim_cur) - 64)
        guard available < limits.maxConnections else { return limits.maxConnections }
        logger.warning(
            "http.maxConnections lowered to fit the open-file limit",
            metadata: [
                "http.max_connections": .stringConvertible(available), "http.max_connections_configured": .stringConvertible(limits.maxConnections),
                "process.open_file_limit": .stringConvertible(limit.rlim_cur),
            ]
        )
        return available
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

    /// Whether the request's `Content-Length` is over ``maximumBody`` (NIO's parser takes any value up to `UInt64.max`).
    static func declaresTooLarge(_ request: Request) -> Bool {
        guard let declared = request.headers[.contentLength] else { return false }
        return UInt64(declared).map { $0 > UInt64(maximumBody) } ?? true
    }

    /// Reads a body of at most 1 MiB, or throws the error answer naming why it could not be read: 413 when it is
    /// larger, 408 when it did not arrive within the body-read timeout (``ConnectionGuard``), 400 when it is not valid
    /// HTTP (a malformed chunked encoding, a connection closed mid-body).
    static func readBody(_ request: Request) async throws(APIError) -> ByteBuffer {
        // A body declared larger than the limit is refused before any of it is read: the client need not send it, and
        // the connection is not held until the body's timeout for bytes that would be refused anyway.
        // (``BodyLimitMiddleware`` refuses it before other routes run; the notification webhook comes here.)
        if declaresTooLarge(request) { throw APIError.bodyTooLarge }
        do {
            return try await request.body.collect(upTo: maximumBody)
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge
        } catch let error as BodyReadTimeout {
            throw APIError.bodyTimeout(seconds: error.seconds)
        } catch {
            throw APIError(.badRequest, .malformedBody, "the body could not be read: \(UntrustedText.escaped(String(describing: error), limit: 80))")
        }
    }
}
