import AppStoreModels
import AppStoreSimulator
import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOHTTP1
import StorekeeperCore
import StorekeeperServer

struct SimulatorInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Write a new simulator: sample catalog, test CA, App Store Server API key."
    )

    @Argument(help: "The directory to create.")
    var dir: String

    @Option(help: "Sandbox or Production.")
    var environment: String = "Sandbox"

    @Option(help: "How long periods last: real-time, 3-minutes, 5-minutes, 15-minutes, 30-minutes, 1-hour.")
    var renewalRate: String = "real-time"

    @Option(help: "The port the simulator will be served on (for DIR/storekeeper.json's serverAPI baseURL).")
    var port: Int = 8090

    func validate() throws {
        guard (1...65_535).contains(port) else { throw ValidationError("--port must be 1 to 65535, not \(port)") }
    }

    func run() async throws {
        try await reportingFailures {
            guard let rate = RenewalRate(rawValue: renewalRate) else {
                throw CLIError(code: "invalid-option", message: "unknown --renewal-rate '\(renewalRate)'")
            }
            let parsed = try parseEnvironment(environment)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: dir, isDirectory: &isDirectory), !isDirectory.boolValue {
                throw CLIError(code: "not-a-directory", message: "\(dir) exists and is a file: give a new directory's path")
            }
            let directory = try SimulatorDirectory.initialize(at: URL(fileURLWithPath: dir), environment: parsed, renewalRate: rate)
            let key = try directory.loadAPIKeyInfo()
            try writeServerConfiguration(directory, key: key, environment: parsed, rate: rate)
            print(
                """
                simulator written to \(dir)
                  catalog:      \(directory.catalogFile.path)
                  trust root:   \(directory.rootCertificateFile.path)   (storekeeper verify --root …)
                  API key:      \(directory.apiPrivateKeyFile(keyId: key.keyId).path)
                  key ID:       \(key.keyId)
                  issuer ID:    \(key.issuerId)
                  server configuration: \(directory.url.appendingPathComponent("storekeeper.json").path)   (storekeeper serve --config …)
                  app API key:  \(directory.url.appendingPathComponent("api/app-api-key").path)   (Authorization: Bearer …; test use only)
                serve it:  storekeeper simulator --dir \(dir) --port \(port) --notify-url http://127.0.0.1:8080/appstore/notifications
                """)
        }
    }

    /// `DIR/storekeeper.json`: a configuration for a Storekeeper server that trusts this simulator (its root, its App
    /// Store Server API key at `--port`, paths relative to the file), with an app API key whose text is kept in
    /// `DIR/api/app-api-key` (mode 600) for scripts and tests, as the simulator's other keys are.
    func writeServerConfiguration(
        _ directory: SimulatorDirectory, key: SimulatorDirectory.APIKeyInfo, environment: AppStoreEnvironment, rate: RenewalRate
    ) throws {
        let catalog = try directory.loadCatalog()
        let apiKey = APIKeyCommand.newKey()
        let bundleId = catalog.apps.first?.bundleId ?? "com.example.storekeeper"
        var levels: [String: Int] = [:]
        for product in catalog.products where product.level != nil { levels[product.productId] = product.level }
        // A non-renewing product grants access for its period, at its shortest on the calendar (the App Store's own
        // end, which the simulator's ground truth uses, is never earlier), or at the sandbox rate's length of it:
        // without it, buying one grants nothing.
        var durations: [String: TimeInterval] = [:]
        for product in catalog.products where product.type == .nonRenewing {
            if let period = product.period { durations[product.productId] = rate.shortestLength(of: period) }
        }
        let configuration = ServerConfiguration(
            apps: catalog.apps.map { app in
                .init(
                    bundleId: app.bundleId, appAppleId: app.appAppleId, environments: [environment], trustedRoots: ["ca/root.pem"],
                    serverAPI: [
                        environment.rawValue: .init(
                            issuerId: key.issuerId, keyId: key.keyId, privateKeyFile: "api/AuthKey_\(key.keyId).p8",
                            baseURL: "http://127.0.0.1:\(port)"
                        )
                    ]
                )
            },
            entitlements: EntitlementConfiguration(subscriptionLevels: levels, nonRenewingDurations: durations),
            apiKeys: [.init(name: "simulator app", sha256: ServerConfiguration.hash(apiKey: apiKey), scope: .app, bundleId: bundleId)]
        )
        struct File: Encodable {
            var apps: [ServerConfiguration.App]
            var entitlements: EntitlementConfiguration
            var apiKeys: [ServerConfiguration.APIKey]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let text = try encoder.encode(File(apps: configuration.apps, entitlements: configuration.entitlements, apiKeys: configuration.apiKeys))
        let file = directory.url.appendingPathComponent("storekeeper.json")
        try text.write(to: file)
        let keyFile = directory.url.appendingPathComponent("api/app-api-key")
        try Data((apiKey + "\n").utf8).write(to: keyFile)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyFile.path)
    }
}

func parseEnvironment(_ text: String) throws -> AppStoreEnvironment {
    guard
        let environment = [AppStoreEnvironment.sandbox, .production].first(where: {
            $0.rawValue.caseInsensitiveCompare(text) == .orderedSame
        })
    else {
        throw CLIError(code: "invalid-option", message: "environment must be Sandbox or Production, not '\(text)'")
    }
    return environment
}
