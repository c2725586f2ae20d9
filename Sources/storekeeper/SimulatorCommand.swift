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

/// `storekeeper simulator …`: a local App Store.
struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "A local App Store: sells, signs, renews, refunds and notifies.",
        subcommands: [
            SimulatorServe.self, SimulatorInit.self, SimulatorRun.self, SimulatorScenarios.self,
            SimulatorCustomer.self, SimulatorBuy.self, SimulatorAdvance.self, SimulatorControl.self,
        ],
        defaultSubcommand: SimulatorServe.self
    )
}

/// Options shared by commands that work on a simulator directory.
struct DirectoryOptions: ParsableArguments {
    @Option(help: "The simulator's directory (made by `storekeeper simulator init`).")
    var dir: String

    init() {}

    init(dir: String) {
        self.dir = dir
    }

    var directory: SimulatorDirectory { SimulatorDirectory(URL(fileURLWithPath: dir)) }

    /// Takes the directory's lock (`DIR/simulator.lock`) for the process's life: one simulator per directory, since
    /// two would each keep their own clock and counters and corrupt the state they share.
    func lock(purpose: String) throws -> ExclusiveLock {
        guard FileManager.default.fileExists(atPath: directory.databaseFile.path) || FileManager.default.fileExists(atPath: directory.stateFile.path)
        else {
            throw CLIError(code: "no-such-simulator", message: "no simulator in \(dir): make one with `storekeeper simulator init \(dir)`")
        }
        do {
            return try ExclusiveLock(path: directory.url.appendingPathComponent("simulator.lock").path, purpose: purpose)
        } catch let held as ExclusiveLock.Held {
            throw CLIError(
                code: "simulator-in-use",
                message: "the simulator in \(dir) is in use by \(held.holder): one simulator per directory; "
                    + "play a scenario on the running one with `storekeeper simulator run --url URL …`"
            )
        }
    }

    /// Loads the simulator, applying a notification URL if one is given.
    func load(notifyURL: String?) async throws -> Simulator {
        let simulator = try Simulator(directory: directory)
        if let notifyURL {
            guard URL(string: notifyURL)?.scheme?.hasPrefix("http") == true else {
                throw CLIError(code: "invalid-option", message: "--notify-url must be an http(s) URL")
            }
            _ = try await simulator.perform { engine in engine.setNotificationURL(notifyURL) }
        }
        return simulator
    }
}

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
            try writeServerConfiguration(directory, key: key, environment: parsed)
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
    func writeServerConfiguration(_ directory: SimulatorDirectory, key: SimulatorDirectory.APIKeyInfo, environment: AppStoreEnvironment) throws {
        let catalog = try directory.loadCatalog()
        let apiKey = APIKeyCommand.newKey()
        let bundleId = catalog.apps.first?.bundleId ?? "com.example.storekeeper"
        var levels: [String: Int] = [:]
        for product in catalog.products where product.level != nil { levels[product.productId] = product.level }
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
            entitlements: EntitlementConfiguration(subscriptionLevels: levels),
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

struct SimulatorServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the App Store Server API and the control API, and deliver notifications."
    )

    @OptionGroup var directory: DirectoryOptions

    @Option(help: "Port on 127.0.0.1 (0: any free port).")
    var port: Int = 8090

    @Option(name: .customLong("notify-url"), help: "Where to POST notifications (saved in the simulator).")
    var notifyURL: String?

    @Option(help: "Sandbox or Production (changes the saved environment).")
    var environment: String?

    @Option(help: "manual: the clock moves only when told; running: it follows real time (renewals at the saved renewal rate).")
    var clock: String?

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be 0 to 65535 (0: any free port), not \(port)") }
    }

    func run() async throws {
        try await reportingFailures {
            let lock = try directory.lock(purpose: "storekeeper simulator serve")
            defer { lock.release() }
            let simulator = try await directory.load(notifyURL: notifyURL)
            if let environment {
                let parsed = try parseEnvironment(environment)
                _ = try await simulator.perform { engine in engine.setEnvironment(parsed) }
            }
            if let clock {
                guard clock == "manual" || clock == "running" else {
                    throw CLIError(code: "invalid-option", message: "--clock must be manual or running, not '\(clock)'")
                }
                _ = try await simulator.perform { engine in engine.setClockRunning(clock == "running") }
            }
            var logger = Logger(label: "simulator")
            logger.logLevel = .info
            let deliverer = NotificationDeliverer(simulator: simulator, logger: logger)
            let app = SimulatorApplication.build(
                simulator: simulator, deliverer: deliverer, port: port, logger: logger,
                onServerRunning: { port in
                    // Written at once (print is buffered when stdout is a pipe): a supervisor reads the port from it.
                    FileHandle.standardOutput.write(
                        Data(
                            "App Store simulator on http://127.0.0.1:\(port) (API: /inApps/…, control: /simulator/v1/…)\n".utf8
                        ))
                }
            )
            try await app.runService()
        }
    }
}

struct SimulatorRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Play a scenario (a shipped one by name, or a file): in a simulator directory, or on a running simulator.",
        discussion: """
            With --dir the scenario plays in this process on the saved simulator and its notifications are delivered \
            to --notify-url (or the saved URL) after every step. With --url it plays on a running simulator, which \
            delivers to its own URL.
            """
    )

    @Option(help: "A simulator directory (made by `storekeeper simulator init`).")
    var dir: String?

    @Option(help: "A running simulator's base URL, e.g. http://127.0.0.1:8090.")
    var url: String?

    @Option(name: .customLong("notify-url"), help: "With --dir: where to POST notifications.")
    var notifyURL: String?

    @Argument(help: "A shipped scenario's name (see `storekeeper simulator scenarios`) or a scenario file.")
    var scenario: String

    func validate() throws {
        guard (dir == nil) != (url == nil) else { throw ValidationError("give exactly one of --dir and --url") }
    }

    func run() async throws {
        try await reportingFailures {
            let (name, text) = try scenarioText()
            if let url {
                try await ControlOptions(url: url).send(.POST, "/scenarios?name=\(name)", body: text)
                return
            }
            let options = DirectoryOptions(dir: dir!)
            let lock = try options.lock(purpose: "storekeeper simulator run --dir")
            defer { lock.release() }
            let simulator = try await options.load(notifyURL: notifyURL)
            let deliverer = NotificationDeliverer(simulator: simulator, logger: Logger(label: "simulator"))
            let before = await simulator.state.notifications.count
            let parsed = try Scenario(name: name, text: text)
            let events = try await ScenarioRunner(simulator: simulator, afterStep: { await deliverer.deliverDue() }).run(parsed)
            for event in events {
                print("\(event.clock.formatted(.iso8601))  line \(event.line): \(event.description)")
            }
            let notifications = await simulator.state.notifications.dropFirst(before)
            print("\nnotifications (\(notifications.count)):")
            for record in notifications {
                let subtype = record.subtype.map { "/\($0)" } ?? ""
                let results = record.sendAttempts.map(\.sendAttemptResult).joined(separator: ", ")
                let result = results.isEmpty ? "not sent (no notification URL)" : results
                print("  \(record.createdAt.formatted(.iso8601))  \(record.notificationType)\(subtype)  \(record.customerId ?? "")  → \(result)")
            }
        }
    }

    /// The scenario's name and text: a shipped one, or a file.
    private func scenarioText() throws -> (String, String) {
        if let shipped = ShippedScenarios.all.first(where: { $0.name == scenario }) { return shipped }
        guard let text = try? String(contentsOfFile: scenario, encoding: .utf8) else {
            throw CLIError(code: "unreadable-input", message: "'\(scenario)' is neither a shipped scenario nor a readable file")
        }
        return (URL(fileURLWithPath: scenario).lastPathComponent, text)
    }
}

struct SimulatorScenarios: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "scenarios", abstract: "List the shipped scenarios.")

    func run() {
        for (name, text) in ShippedScenarios.all {
            let summary = text.split(separator: "\n").first.map { $0.drop { $0 == "#" || $0 == " " } } ?? ""
            print("\(name.padding(toLength: 24, withPad: " ", startingAt: 0)) \(summary)")
        }
    }
}

// MARK: - Actions on a running simulator, through its control API

/// Options for talking to a running simulator.
struct ControlOptions: ParsableArguments {
    @Option(help: "The running simulator's base URL (default: $STOREKEEPER_SIMULATOR_URL, else http://127.0.0.1:8090).")
    var url: String = ProcessInfo.processInfo.environment["STOREKEEPER_SIMULATOR_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://127.0.0.1:8090"

    init() {}

    init(url: String) {
        self.url = url
    }

    func send(_ method: HTTPMethod, _ path: String, body: String? = nil) async throws {
        var request = HTTPClientRequest(url: url + "/simulator/v1" + path)
        request.method = method
        request.headers.add(name: "Content-Type", value: "application/json")
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            throw CLIError(
                code: "timeout",
                message: "the simulator at \(url) did not answer within 30 s: it answers a control action after delivering "
                    + "the notifications it caused, so a notification receiver that accepts connections but does not answer "
                    + "holds it up to 10 s per notification"
            )
        } catch {
            throw CLIError(code: "unreachable", message: "no simulator answered at \(url): \(error)")
        }
        let text = String(buffer: try await response.body.collect(upTo: 16 << 20))
        guard (200..<300).contains(response.status.code) else {
            throw CLIError(code: "simulator-\(response.status.code)", message: text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        print(text)
    }
}

func jsonBody(_ fields: [String: Any?]) -> String {
    let present = fields.compactMapValues { $0 }
    let data = (try? JSONSerialization.data(withJSONObject: present, options: [.sortedKeys])) ?? Data("{}".utf8)
    return String(decoding: data, as: UTF8.self)
}

struct SimulatorCustomer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "customer", abstract: "Create an Apple Account on a running simulator.")
    @OptionGroup var control: ControlOptions
    @Option var id: String
    @Option(help: "ISO 3166-1 alpha-3 storefront.") var storefront: String = "USA"

    func run() async throws {
        try await reportingFailures {
            try await control.send(.POST, "/customers", body: jsonBody(["id": id, "storefront": storefront]))
        }
    }
}

struct SimulatorBuy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "buy", abstract: "Buy a product; prints the signedTransaction a StoreKit 2 app would get."
    )
    @OptionGroup var control: ControlOptions
    @Option var customer: String
    @Option var product: String
    @Option var quantity: Int = 1
    @Option var offer: String?
    @Option(name: .customLong("app-account-token")) var appAccountToken: String?

    func run() async throws {
        try await reportingFailures {
            try await control.send(
                .POST, "/purchases",
                body: jsonBody([
                    "customerId": customer, "productId": product, "quantity": quantity, "offerId": offer,
                    "appAccountToken": appAccountToken,
                ]))
        }
    }
}

struct SimulatorAdvance: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "advance", abstract: "Move a running simulator's clock forward.")
    @OptionGroup var control: ControlOptions
    @Option var days: Double?
    @Option var seconds: Double?

    func run() async throws {
        try await reportingFailures {
            try await control.send(.POST, "/clock/advance", body: jsonBody(["days": days, "seconds": seconds]))
        }
    }
}

struct SimulatorControl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "control",
        abstract: "Call any control endpoint: storekeeper simulator control POST /customers/alice/billing '{\"works\":false}'."
    )
    @OptionGroup var control: ControlOptions
    @Argument(help: "GET, POST or PUT.") var method: String
    @Argument(help: "A path under /simulator/v1, e.g. /ground-truth.") var path: String
    @Argument(help: "A JSON body.") var body: String?

    func run() async throws {
        try await reportingFailures {
            try await control.send(HTTPMethod(rawValue: method.uppercased()), path, body: body)
        }
    }
}
