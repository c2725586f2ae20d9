import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

/// A simulator served over loopback (App Store Server API, control API, deliverer) and a Storekeeper server that
/// can be started and stopped on one ledger, with App Store Server API credentials for the simulator: what the
/// recovery and reconciliation tests need. The server's clock is the simulator's virtual clock.
struct RecoveryTestbed: Sendable {
    let directory: URL
    let simulatorDirectory: SimulatorDirectory
    let simulator: Simulator
    let environment: AppStoreEnvironment
    let database: String
    let clock: TestClock
    /// The one deliverer: the served simulator's, and the one actions and advances deliver with (two would race).
    let deliverer: NotificationDeliverer
    static let appKey = "recovery-app-\(UUID())"
    static let adminKey = "recovery-admin-\(UUID())"
    static let supportKey = "recovery-support-\(UUID())"

    init(environment: AppStoreEnvironment) async throws {
        directory = TestFiles.directory.appendingPathComponent("recovery-\(UUID())")
        simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"), environment: environment)
        simulator = try Simulator(directory: simulatorDirectory)
        self.environment = environment
        database = directory.appendingPathComponent("ledger.sqlite").path
        clock = .init(await simulator.state.now)
        deliverer = NotificationDeliverer(
            simulator: simulator, logger: Logger(label: "simulator", factory: { _ in SwiftLogNoOpLogHandler() }), timeout: .seconds(5))
    }

    /// A configuration that trusts `root` (the simulator's by default) and calls the simulator's API at `baseURL`.
    func configuration(baseURL: String, root: String? = nil, recovery: ServerConfiguration.RecoverySettings? = nil) throws -> ServerConfiguration {
        let key = try simulatorDirectory.loadAPIKeyInfo()
        let credentials = ServerAPICredentials(
            issuerId: key.issuerId, keyId: key.keyId, privateKeyFile: simulatorDirectory.apiPrivateKeyFile(keyId: key.keyId).path, baseURL: baseURL
        )
        return ServerConfiguration(
            apps: [
                .init(
                    bundleId: "com.example.storekeeper", appAppleId: 6_450_000_001, environments: [environment],
                    trustedRoots: [root ?? simulatorDirectory.rootCertificateFile.path], serverAPI: [environment.rawValue: credentials]
                )
            ],
            entitlements: EntitlementConfiguration(),
            apiKeys: [
                .init(name: "app", sha256: ServerConfiguration.hash(apiKey: Self.appKey), scope: .app, bundleId: "com.example.storekeeper"),
                .init(name: "admin", sha256: ServerConfiguration.hash(apiKey: Self.adminKey), scope: .admin, bundleId: nil),
                .init(name: "support", sha256: ServerConfiguration.hash(apiKey: Self.supportKey), scope: .support, bundleId: nil),
            ],
            recovery: recovery ?? .init(intervalSeconds: 0.2, overlapSeconds: 60, failuresIntervalSeconds: 0.5)
        )
    }

    /// Serves the simulator on a loopback port for `body`.
    func withSimulator(_ body: @Sendable @escaping (String) async throws -> Void) async throws {
        let logger = Logger(label: "simulator", factory: { _ in SwiftLogNoOpLogHandler() })
        let ports = AsyncStream<Int>.makeStream()
        let app = SimulatorApplication.build(simulator: simulator, deliverer: deliverer, port: 0, logger: logger) { ports.continuation.yield($0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.runService(gracefulShutdownSignals: []) }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            try await body("http://127.0.0.1:\(port)")
            group.cancelAll()
        }
    }

    /// Runs the Storekeeper server on the ledger, with its recovery job, for `body` (its base URL); the simulator
    /// notifies it meanwhile.
    func withServer(_ configuration: ServerConfiguration, _ body: @Sendable @escaping (String) async throws -> Void) async throws {
        let store = try SQLiteLedgerStore(path: database)
        let logger = Logger(label: "server", factory: { _ in SwiftLogNoOpLogHandler() })
        let ports = AsyncStream<Int>.makeStream()
        let clock = self.clock
        let app = StorekeeperApplication.buildApplication(
            store: store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0, logger: logger,
            now: { clock.now }, apiClients: try configuration.makeServerAPIClients(logger: logger), onServerRunning: { ports.continuation.yield($0) }
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.runService(gracefulShutdownSignals: []) }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            let base = "http://127.0.0.1:\(port)"
            _ = try await simulator.perform { engine in engine.setNotificationURL(base + "/appstore/notifications") }
            try await body(base)
            // Down: nothing listens there any more.
            group.cancelAll()
        }
    }

    /// Moves the simulator's clock (delivering at each due time) and the server's with it.
    func advance(by seconds: TimeInterval) async throws {
        let deliverer = self.deliverer
        try await simulator.advance(by: seconds) { await deliverer.deliverDue() }
        clock.set(await simulator.state.now)
    }

    /// Runs `change` on the simulator, then delivers what is due (to whatever the notification URL is now).
    func act(_ change: @Sendable (inout LifecycleEngine) throws(SimulatorError) -> Void) async throws {
        _ = try await simulator.perform { (engine) throws(SimulatorError) in try change(&engine) }
        await deliverer.deliverDue()
    }

    /// POSTs a customer's signed transaction as their app does.
    static func submit(_ jws: String, for customer: String, to base: String) async throws -> Int {
        try await call(.POST, base + "/v1/customers/\(customer)/transactions", key: appKey, body: #"{"signedTransaction":"\#(jws)"}"#).status
    }

    static func call(_ method: HTTPMethod, _ url: String, key: String, body: String? = nil) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 22)
        return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView))) as? [String: Any] ?? [:])
    }

    /// The same call made `count` times at once (racing requests); the answers in the order they came.
    static func callConcurrently(
        _ count: Int, _ method: HTTPMethod, _ url: String, key: String, body: String? = nil
    ) async throws -> [(status: Int, json: [String: Any])] {
        // The JSON crosses tasks as bytes: a dictionary of `Any` is not Sendable.
        try await withThrowingTaskGroup(of: (status: Int, text: Data).self) { group in
            for _ in 0..<count {
                group.addTask {
                    let answer = try await call(method, url, key: key, body: body)
                    return (answer.status, try JSONSerialization.data(withJSONObject: answer.json))
                }
            }
            var answers: [(status: Int, json: [String: Any])] = []
            for try await (status, text) in group {
                answers.append((status, try JSONSerialization.jsonObject(with: text) as? [String: Any] ?? [:]))
            }
            return answers
        }
    }

    /// Each customer's entitled products and balances in Storekeeper, against the simulator's ground truth; the
    /// customers that differ (empty when all match).
    func mismatches(at base: String) async throws -> [String] {
        var differing: [String] = []
        for truth in try await simulator.read({ $0.groundTruth() }) {
            let answer = try await Self.call(.GET, base + "/v1/customers/\(truth.customerId)?environment=\(environment.rawValue)", key: Self.appKey)
            let products = Set(((answer.json["entitlements"] as? [[String: Any]]) ?? []).compactMap { $0["productId"] as? String })
            let balance = (answer.json["consumableBalance"] as? [String: Int]) ?? [:]
            if products != Set(truth.entitlements.map(\.productId)) || balance != truth.consumableBalance.filter({ $0.value != 0 }) {
                differing.append(
                    "\(truth.customerId): \(products.sorted()) \(balance) vs \(truth.entitlements.map(\.productId).sorted()) \(truth.consumableBalance)"
                )
            }
        }
        return differing
    }

    /// Waits (up to `seconds`) until every customer matches the ground truth; the last mismatches otherwise.
    func converged(at base: String, within seconds: Double = 30) async throws -> [String] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        var last: [String] = []
        repeat {
            last = try await mismatches(at: base)
            if last.isEmpty { return [] }
            try await Task.sleep(for: .milliseconds(200))
        } while ContinuousClock.now < deadline
        return last
    }
}
