import AppStoreModels
import AppStoreSigning
import ArgumentParser
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import StorekeeperCore
import StorekeeperServer

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the notification webhook and the app API on a SQLite ledger (the default) or PostgreSQL."
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Option(help: "Port on --host (0: any free port).") var port: Int = 8080
    @Option(help: "Address to listen on.") var host: String = "127.0.0.1"
    @Option(help: ArgumentHelp(stringLiteral: LedgerDatabase.help)) var database: String = "storekeeper.sqlite"

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be 0 to 65535 (0: any free port), not \(port)") }
    }

    func run() async throws {
        do {
            let configuration = try ServerConfiguration.load(path: config)
            let verifiers = try configuration.makeVerifiers()
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .info
            // Credentials are loaded and checked at start so that a wrong key file fails now, not at the first call.
            let apiClients = try configuration.makeServerAPIClients(logger: logger)
            let recovery = configuration.recovery.settings
            for which in apiClients.keys.sorted(by: { $0.description < $1.description }) {
                logger.info(
                    !configuration.recovery.enabled
                        ? "App Store Server API credentials loaded; notification recovery is off"
                        : "App Store Server API credentials loaded; notification recovery runs at start and then every interval",
                    metadata: [
                        "app.bundle_id": .string(which.bundleId), "app.environment": .string(which.environment.rawValue),
                        "recovery.interval_seconds": .stringConvertible(recovery.interval / .seconds(1)),
                    ]
                )
            }
            if configuration.apiKeys.isEmpty {
                logger.warning("no API keys configured: the app API (/v1/customers/…) refuses every request")
            }
            let cache = configuration.customerCacheLimits
            logger.info(
                cache.capacity == 0 ? "customer cache off" : "customer cache on",
                metadata: ["cache.capacity": .stringConvertible(cache.capacity), "cache.max_age_seconds": .stringConvertible(cache.maxAgeSeconds)]
            )
            let http = configuration.http
            logger.info(
                "connection limits",
                metadata: [
                    "http.idle_timeout_seconds": .stringConvertible(http.idleTimeout),
                    "http.header_read_timeout_seconds": .stringConvertible(http.headerReadTimeout),
                    "http.body_read_timeout_seconds": .stringConvertible(http.bodyReadTimeout),
                    "http.response_timeout_seconds": .stringConvertible(http.responseTimeout),
                    "http.max_connections": .stringConvertible(http.maxConnections),
                ]
            )
            logger.info(
                "retention",
                metadata: [
                    "retention.refused_notifications": .stringConvertible(configuration.refusedNotificationsKept),
                    "retention.raw_payload_days": .string(configuration.retention.rawPayloadDays.map { "\($0)" } ?? "forever"),
                ]
            )
            // A port in use is reported now, before the ledger is opened, migrated or its jobs' leases taken.
            try await Self.checkAvailable(host: host, port: port)
            let exporter = MetricsExporter()
            let ledger = try await LedgerDatabase.open(database, access: .serving, logger: logger, metrics: exporter.metrics)
            let store = ledger.store
            logger.info(
                ledger.migrationsApplied.isEmpty ? "database opened, schema up to date" : "database migrated",
                metadata: [
                    "database": .string(ledger.description), "database.migrations_applied": .array(ledger.migrationsApplied.map { .string($0) }),
                ]
            )
            // Each webhook endpoint's place in the outbox, before the first request: an endpoint new to the ledger
            // receives the events committed from now on (earlier ones by `storekeeper events replay`).
            try await WebhookDeliveryService.register(configuration.webhooks, in: store)
            if !configuration.webhooks.isEmpty {
                logger.info("webhook endpoints", metadata: ["webhook.endpoints": .array(configuration.webhooks.map { .string($0.name) })])
            }
            let app = StorekeeperApplication.buildApplication(
                store: store, configuration: configuration, verifiers: verifiers,
                host: host, port: port, logger: logger, exporter: exporter, apiClients: apiClients,
                ownsStore: true, afterStoreClosed: { await ledger.close() }, checkCredentialsAtStart: true,
                onServerRunning: { port in
                    // Written unbuffered, so a supervisor reading the pipe learns the port at once.
                    try? FileHandle.standardOutput.write(
                        contentsOf:
                            Data(
                                "Storekeeper on http://\(host):\(port) (webhook: /appstore/notifications, app API: /v1/customers/…)\n".utf8
                            ))
                }
            )
            do {
                // The store is the application's first service: closed (and the SQLite lock given back) after the server
                // and every job have stopped.
                try await app.runService()
                logger.info("stopped: every request answered, every job ended, the ledger closed")
            } catch {
                await ledger.close()
                throw error
            }
        } catch let error as ConfigurationError {
            reportError("\(error)")
            throw ExitCode.failure
        } catch let error as StorageError {
            reportError("\(error)")
            throw ExitCode.failure
        } catch let error as CLIError {
            reportError("\(error)")
            throw ExitCode.failure(for: error)
        } catch let error as ExitCode {
            throw error
        } catch {
            // E.g. a host that does not resolve, or a port in use.
            reportError("cannot serve on \(host):\(port): \(error)")
            throw ExitCode.failure
        }
    }

    /// Binds `host:port` for a moment, so that an address in use or a host that does not resolve is reported in
    /// words before anything else happens (port 0 too: any free port, but on `host`, which must be this machine's).
    static func checkAvailable(host: String, port: Int) async throws {
        do {
            let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .bind(host: host, port: port).get()
            try await channel.close()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            throw CLIError(
                code: "port-in-use", message: "port \(port) on \(host) is in use by another process (another server?): stop it, or give --port")
        } catch let error as IOError where error.errnoCode == EACCES {
            throw CLIError(
                code: "port-refused", message: "this process may not listen on port \(port) (ports below 1024 need privileges): give --port")
        } catch let error as IOError where error.errnoCode == EADDRNOTAVAIL {
            throw CLIError(
                code: "no-such-address",
                message: "\(host) is not an address of this machine: give --host (127.0.0.1, 0.0.0.0, or one of its addresses)")
        } catch {
            throw CLIError(code: "cannot-listen", message: "cannot listen on \(host):\(port): \(error)")
        }
    }
}
