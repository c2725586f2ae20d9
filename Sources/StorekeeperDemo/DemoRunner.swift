import AppStoreModels
import AppStoreSigning
package import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import HashTreeCollections
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import Synchronization

/// `storekeeper demo`: the simulator and the server in one process on loopback ports, with a temporary SQLite file.
/// Plays the shipped scenarios (with notifications duplicated and reordered by fault injection), the "apps" submit
/// their purchases, and at the end every customer's entitlements in Storekeeper are compared with the simulator's
/// ground truth.
package struct DemoRunner: Sendable {
    /// One row of the final table.
    package struct Row: Sendable {
        package var customerId: String
        package var storekeeper: [String]
        package var groundTruth: [String]
        package var matches: Bool { storekeeper == groundTruth }
    }

    /// The scenarios played, in order, and the faults injected during each.
    package static let plan: [(scenario: String, faults: FaultConfiguration?)] = [
        ("subscriber-lifecycle", nil),
        ("refunds", nil),
        ("family-sharing", nil),
        (
            "plan-changes",
            {
                var faults = FaultConfiguration()
                faults.duplicateNextNotifications = 3
                faults.reorderNotifications = true
                return faults
            }()
        ),
    ]

    let print: @Sendable (String) -> Void

    package init(print: @escaping @Sendable (String) -> Void) {
        self.print = print
    }

    /// Runs the demo; returns the table.
    package func run() async throws -> [Row] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("storekeeper-demo-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulatorDirectory = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("simulator"))
        let simulator = try Simulator(directory: simulatorDirectory)
        let apiKey = UUID().uuidString
        // The developer's backend: a receiver of the server's events, on a port of its own.
        let secret = WebhookSecret.generate()
        let receiver = DemoReceiver(secret: try WebhookSecret(secret))
        let receiverPorts = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "storekeeper")
        logger.logLevel = .critical
        // Quiet as the server is: the receiver's cancellation at the end would read as an error.
        let receiverApp = Application(
            router: receiver.router(), configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in receiverPorts.continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        var configuration = Self.configuration(root: simulatorDirectory.rootCertificateFile.path, apiKey: apiKey)
        // The App Store Server API (for migration) is the simulator's, served on a port of its own; its key signs offers.
        let simulatorPorts = AsyncStream<Int>.makeStream()
        let servedSimulator = SimulatorApplication.build(
            simulator: simulator, deliverer: NotificationDeliverer(simulator: simulator, logger: logger), port: 0, logger: logger
        ) { simulatorPorts.continuation.yield($0) }
        let simulatorTask = Task { try await servedSimulator.runService(gracefulShutdownSignals: []) }
        defer { simulatorTask.cancel() }
        var simulatorIterator = simulatorPorts.stream.makeAsyncIterator()
        guard let simulatorPort = await simulatorIterator.next() else { throw DemoError(message: "the simulator's API did not start") }
        let keyInfo = try simulatorDirectory.loadAPIKeyInfo()
        let keyFile = simulatorDirectory.apiPrivateKeyFile(keyId: keyInfo.keyId).path
        configuration.apps[0].serverAPI = [
            "Sandbox": .init(issuerId: keyInfo.issuerId, keyId: keyInfo.keyId, privateKeyFile: keyFile, baseURL: "http://127.0.0.1:\(simulatorPort)")
        ]
        configuration.apps[0].offers = .init(
            issuerId: keyInfo.issuerId, keyId: keyInfo.keyId, privateKeyFile: keyFile,
            policy: OfferPolicy(
                rules: [
                    .init(offerId: "winback.month", customers: .lapsed, oncePerCustomer: true), .init(offerId: "promo.half", customers: .subscribed),
                ],
                subscriptionGroups: ["21000001": ["premium.monthly", "pro.monthly", "pro.yearly", "basic.monthly"]]))
        // The demo shows what arrives by webhook and by migration: no recovery job pulling history meanwhile.
        configuration.recovery = .init(enabled: false)
        let store = try SQLiteLedgerStore(path: directory.appendingPathComponent("storekeeper.sqlite").path)
        let clock = DemoClock(await simulator.state.now)
        let ports = AsyncStream<Int>.makeStream()
        let receiverTask = Task { try await receiverApp.runService(gracefulShutdownSignals: []) }
        defer { receiverTask.cancel() }
        var receiverIterator = receiverPorts.stream.makeAsyncIterator()
        guard let receiverPort = await receiverIterator.next() else { throw DemoError(message: "the demo receiver did not start") }
        configuration.webhooks = [
            .init(name: "demo-backend", url: "http://127.0.0.1:\(receiverPort)/events", secret: secret, retryScheduleSeconds: [0.5, 1, 2])
        ]
        try await WebhookDeliveryService.register(configuration.webhooks, in: store)
        let app = StorekeeperApplication.buildApplication(
            store: store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0, logger: logger,
            now: { clock.now }, apiClients: try configuration.makeServerAPIClients(logger: logger),
            onServerRunning: { port in ports.continuation.yield(port) }
        )
        let rows = try await withThrowingTaskGroup(of: [Row]?.self) { group in
            group.addTask {
                try await app.runService(gracefulShutdownSignals: [])
                return nil
            }
            var iterator = ports.stream.makeAsyncIterator()
            guard let port = await iterator.next() else { throw DemoError(message: "the server did not start") }
            let base = "http://127.0.0.1:\(port)"
            print("Storekeeper on \(base), App Store simulator in-process, SQLite at \(directory.path)/storekeeper.sqlite\n")
            _ = try await simulator.perform { engine in engine.setNotificationURL(base + "/appstore/notifications") }
            let session = DemoSession(
                simulator: simulator, base: base, apiKey: apiKey, clock: clock, print: print,
                deliverer: NotificationDeliverer(simulator: simulator, logger: logger)
            )
            for (scenario, faults) in Self.plan {
                try await session.play(scenario, faults: faults)
            }
            try await session.migrateFromReceipts()
            try await session.offerWinBack()
            let rows = try await session.table()
            try await Self.reportEvents(receiver: receiver, store: store, rows: rows, print: print)
            group.cancelAll()
            return rows
        }
        return rows
    }

    /// Waits for every event to reach the receiver, then says what it received.
    static func reportEvents(receiver: DemoReceiver, store: SQLiteLedgerStore, rows: [Row], print: @Sendable (String) -> Void) async throws {
        // What the expiry job does every events.expiryCheckSeconds: access that ended by time, with no notification.
        let expiries = try await store.reevaluate(try await store.customersDue(at: store.outbox.now, limit: 10_000))
        let events = try await store.lastEventPosition()
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while receiver.summary.events.count < events, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        let received = receiver.summary
        var types: [String: Int] = [:]
        for event in received.events.values { types[event.type, default: 0] += 1 }
        print("── events at the demo's webhook receiver (Standard Webhooks, signatures checked)")
        print("  \(received.events.count) of \(events) events received in \(received.requests) requests, \(received.refused) signatures refused")
        if expiries > 0 { print("  (\(expiries) of them expiries nobody announced, emitted by the expiry job)") }
        for (type, count) in types.sorted(by: { $0.key < $1.key }) { print("      \(type) ×\(count)") }
        let agree = rows.filter { row in
            (received.states[row.customerId]?.entitled ?? []) == row.storekeeper.filter { !$0.contains("×") }
        }.count
        print("  each customer's last event gives their entitlements: \(agree) of \(rows.count) customers; out of order: \(received.outOfOrder)\n")
        guard received.events.count == events, received.refused == 0, received.outOfOrder == 0, agree == rows.count else {
            throw DemoError(message: "the receiver did not get every event once, in order, signed")
        }
    }

    /// Storekeeper's configuration for the simulator's sample catalog.
    static func configuration(root: String, apiKey: String) -> ServerConfiguration {
        var levels: [String: Int] = [:]
        for product in Catalog.sample.products where product.level != nil { levels[product.productId] = product.level }
        return ServerConfiguration(
            apps: [.init(bundleId: "com.example.storekeeper", appAppleId: 6_450_000_001, environments: [.sandbox], trustedRoots: [root])],
            entitlements: EntitlementConfiguration(
                productEntitlements: [:], subscriptionLevels: levels, nonRenewingDurations: ["season.pass": 89 * 86_400]
            ),
            apiKeys: [.init(name: "demo app", sha256: ServerConfiguration.hash(apiKey: apiKey), scope: .app, bundleId: "com.example.storekeeper")]
        )
    }
}

/// The server's idea of now: the simulator's clock.
final class DemoClock: Sendable {
    private let value: Mutex<Date>
    init(_ date: Date) { value = Mutex(date) }
    var now: Date {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// A failed demo.
package struct DemoError: Error, CustomStringConvertible {
    package var message: String
    package var description: String { message }
}

/// The running demo: plays scenarios step by step, delivers notifications, submits purchases as the apps would, and
/// prints what changed.
actor DemoSession {
    let simulator: Simulator
    let base: String
    let apiKey: String
    let clock: DemoClock
    let print: @Sendable (String) -> Void
    let deliverer: NotificationDeliverer
    private var submitted: Set<String> = []

    /// A transaction the apps must not submit (it was bought before the server existed).
    func markSubmitted(_ transactionId: String) { submitted.insert(transactionId) }
    private var lastEntitlements: [String: [String]] = [:]
    private var notificationsSeen = 0

    init(
        simulator: Simulator, base: String, apiKey: String, clock: DemoClock, print: @escaping @Sendable (String) -> Void,
        deliverer: NotificationDeliverer
    ) {
        self.simulator = simulator
        self.base = base
        self.apiKey = apiKey
        self.clock = clock
        self.print = print
        self.deliverer = deliverer
    }

    func play(_ name: String, faults: FaultConfiguration?) async throws {
        guard let scenario = try ShippedScenarios.named(name) else { throw DemoError(message: "no scenario \(name)") }
        print("── \(name)" + (faults != nil ? " (notifications duplicated and reordered)" : ""))
        let heldFrom = await simulator.state.notifications.count
        if let faults { _ = try await simulator.perform { engine in engine.setFaults(faults) } }
        // An advance stops at each renewal to deliver what is due then; with reordering on, nothing goes out.
        let deliverer = self.deliverer
        let holding = faults?.reorderNotifications == true
        let runner = ScenarioRunner(simulator: simulator, afterStep: { if !holding { await deliverer.deliverDue() } })
        for step in scenario.steps {
            let description = try await runner.play(step, of: name)
            let now = await simulator.state.now
            clock.now = now
            try await submitNewPurchases()
            // With reordering on, notifications pile up and go out together at the end, newest first.
            if faults?.reorderNotifications != true { await deliverer.deliverDue() }
            print("  \(now.formatted(.iso8601))  \(description)")
            let state = await simulator.state
            for record in state.notifications.dropFirst(notificationsSeen) where faults?.reorderNotifications != true {
                let subtype = record.subtype.map { "/\($0)" } ?? ""
                print("      notification \(record.notificationType)\(subtype) → \(record.sendAttempts.last?.sendAttemptResult ?? "pending")")
            }
            notificationsSeen = state.notifications.count
            for customer in state.customers.keys.sorted() {
                let current = try await entitlements(of: customer)
                if current != lastEntitlements[customer, default: []] {
                    print("      \(customer): [\(current.joined(separator: ", "))]")
                    lastEntitlements[customer] = current
                }
            }
        }
        if faults?.reorderNotifications == true {
            await deliverer.deliverDue()
            print("  delivered the held notifications, newest first (some twice):")
            for record in await simulator.state.notifications.suffix(from: heldFrom) {
                let subtype = record.subtype.map { "/\($0)" } ?? ""
                print("      notification \(record.notificationType)\(subtype) → \(record.sendAttempts.last?.sendAttemptResult ?? "pending")")
            }
            for customer in await simulator.state.customers.keys.sorted() {
                let current = try await entitlements(of: customer)
                if current != lastEntitlements[customer, default: []] {
                    print("      \(customer): [\(current.joined(separator: ", "))]")
                    lastEntitlements[customer] = current
                }
            }
        }
        _ = try await simulator.perform { engine in engine.setFaults(FaultConfiguration()) }
        print("")
    }

    /// What each customer's app sends Storekeeper after a purchase: the signed transaction from StoreKit.
    func submitNewPurchases() async throws {
        let state = await simulator.state
        for record in state.transactions.values.sorted(by: { $0.info.transactionId < $1.info.transactionId })
        where !submitted.contains(record.info.transactionId) {
            let signed = try await simulator.read { (engine) throws(SimulatorError) in try engine.signTransaction(record.info.transactionId) }
            var request = HTTPClientRequest(url: "\(base)/v1/customers/\(record.customerId)/transactions")
            request.method = .POST
            request.headers.add(name: "Authorization", value: "Bearer \(apiKey)")
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: #"{"signedTransaction":"\#(signed)"}"#))
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            _ = try await response.body.collect(upTo: 1 << 20)
            guard response.status == .ok else {
                throw DemoError(message: "submitting transaction \(record.info.transactionId) answered \(response.status.code)")
            }
            submitted.insert(record.info.transactionId)
        }
    }

    /// The customer's entitled products (and consumable balances, as `product ×n`) according to Storekeeper.
    func entitlements(of customer: String) async throws -> [String] {
        var request = HTTPClientRequest(url: "\(base)/v1/customers/\(customer)?environment=Sandbox")
        request.headers.add(name: "Authorization", value: "Bearer \(apiKey)")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok else { return [] }
        struct View: Decodable {
            var entitlements: [Item]
            var consumableBalance: [String: Int]
            struct Item: Decodable { var productId: String }
        }
        let view = try JSONDecoder().decode(View.self, from: Data(body.readableBytesView))
        return Set(view.entitlements.map(\.productId)).sorted() + Self.balances(view.consumableBalance)
    }

    static func balances(_ balance: [String: Int]) -> [String] {
        balance.filter { $0.value != 0 }.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }
    }

    func table() async throws -> [DemoRunner.Row] {
        let truth = try await simulator.read { $0.groundTruth() }
        var rows: [DemoRunner.Row] = []
        for customer in truth {
            rows.append(
                .init(
                    customerId: customer.customerId, storekeeper: try await entitlements(of: customer.customerId),
                    groundTruth: customer.entitlements.map(\.productId).sorted() + Self.balances(customer.consumableBalance)
                ))
        }
        return rows
    }
}
