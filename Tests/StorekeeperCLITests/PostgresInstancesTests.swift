import AppStoreModels
import AppStoreSimulator
import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperTesting
import Synchronization
import Testing

/// Three `storekeeper serve` processes on one PostgreSQL database behind a round-robin balancer, as an operator runs
/// them: the simulator's deliveries spread over them (duplicated and reordered by its fault injection), one SIGKILLed
/// mid-burst and restarted.
@Suite("PostgreSQL: three serve instances", .needsPostgres)
struct PostgresInstancesTests {
    static var baseURL: String? { PostgresTestDatabase.urlText }
    static let apiKey = "e2e-app-key-0123456789"

    /// A new database on the test server, as a URL `serve` takes (password included).
    static func newDatabase() async throws -> String {
        let base = try #require(baseURL)
        let name = "storekeeper_e2e_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(12)
        _ = try await PostgresDatabaseURL(base).creatingDatabase(named: name)
        var components = try #require(URLComponents(string: base))
        components.path = "/" + name
        return try #require(components.string)
    }

    /// Runs `body`, then drops `database` (ending the connections of instances it left running), so that a
    /// developer's own PostgreSQL server does not collect the tests' databases.
    static func droppingAfterwards(_ database: String, _ body: () async throws -> Void) async throws {
        let outcome: Result<Void, any Error>
        do {
            try await body()
            outcome = .success(())
        } catch { outcome = .failure(error) }
        do {
            try await PostgresDatabaseURL(database).droppingDatabase(closingConnections: true)
        } catch {
            Issue.record("the test database was not dropped: \(error)")
        }
        try outcome.get()
    }

    /// Forwards each webhook request to the next backend in turn; 502 when that one is down (the App Store retries).
    final class Balancer: Sendable {
        private let state = Mutex<(ports: [Int], next: Int)>(([], 0))
        func set(_ index: Int, port: Int) { state.withLock { if index < $0.ports.count { $0.ports[index] = port } else { $0.ports.append(port) } } }
        func next() -> Int {
            state.withLock { state in
                defer { state.next += 1 }
                return state.ports[state.next % state.ports.count]
            }
        }
    }

    static func startBalancer(_ balancer: Balancer) async throws -> (port: Int, task: Task<Void, any Error>) {
        let router = Router()
        router.post("/appstore/notifications") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 2 << 20)
            var forward = HTTPClientRequest(url: "http://127.0.0.1:\(balancer.next())/appstore/notifications")
            forward.method = .POST
            forward.headers.add(name: "Content-Type", value: "application/json")
            forward.body = .bytes(body)
            do {
                let response = try await HTTPClient.shared.execute(forward, timeout: .seconds(15))
                let answer = try await response.body.collect(upTo: 1 << 20)
                return Response(status: .init(code: Int(response.status.code)), body: .init(byteBuffer: answer))
            } catch {
                return Response(status: .badGateway)
            }
        }
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) },
            logger: Logger(label: "balancer", factory: { _ in SwiftLogNoOpLogHandler() })
        )
        let task = Task { try await app.runService() }
        for await port in ports { return (port, task) }
        throw CancellationError()
    }

    static func request(_ method: HTTPMethod, port: Int, _ path: String, body: String? = nil) async throws -> (UInt, String) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(apiKey)")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return (response.status.code, String(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    /// A customer's entitled products and balances as one instance answers.
    static func entitlements(_ customer: String, port: Int) async throws -> [String] {
        let (status, body) = try await request(.GET, port: port, "/v1/customers/\(customer)?environment=Production")
        guard status == 200 else { return ["HTTP \(status)"] }
        struct View: Decodable {
            var entitlements: [Item]
            var consumableBalance: [String: Int]
            struct Item: Decodable { var productId: String }
        }
        let view = try JSONDecoder().decode(View.self, from: Data(body.utf8))
        return Set(view.entitlements.map(\.productId)).sorted()
            + view.consumableBalance.filter { $0.value != 0 }.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }
    }

    static func truth(_ simulator: Simulator) async throws -> [String: [String]] {
        var truth: [String: [String]] = [:]
        for customer in try await simulator.read({ $0.groundTruth() }) {
            truth[customer.customerId] =
                customer.entitlements.map(\.productId).sorted()
                + customer.consumableBalance.filter { $0.value != 0 }.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }
        }
        return truth
    }

    /// The crash tests' simulator and configuration in `directory`, the configuration edited by `edit`.
    static func setUp(in directory: URL, editing edit: (inout [String: Any]) -> Void) throws -> (Simulator, config: String) {
        let (simulator, config, _) = try CrashRecoveryTests.setUp(in: directory)
        var configuration = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: config))) as! [String: Any]
        edit(&configuration)
        try JSONSerialization.data(withJSONObject: configuration).write(to: URL(fileURLWithPath: config))
        return (simulator, config)
    }

    @Test(
        "deliveries spread over three instances with duplicates, reorders and a SIGKILL: every customer equals the ground truth on every instance, nothing applied twice, caches follow each write"
    )
    func threeInstances() async throws {
        let directory = TestFiles.directory.appendingPathComponent("pg-e2e-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (simulator, config) = try Self.setUp(in: directory) { configuration in
            // An app key, so that the test reads customers and submits purchases as the app does.
            let hash = SHA256.hash(data: Data(Self.apiKey.utf8)).map { String(format: "%02x", $0) }.joined()
            configuration["apiKeys"] = [["name": "e2e", "sha256": hash, "scope": "app", "bundleId": "com.example.storekeeper"]]
            configuration["entitlements"] = [
                "productEntitlements": ["pro.monthly": ["pro"]], "subscriptionLevels": [:], "nonRenewingDurations": [:],
                "billingRetryGrantsAccess": false,
            ]
        }
        let database = try await Self.newDatabase()
        try await Self.droppingAfterwards(database) {

            var servers: [ServerProcess] = []
            for _ in 0..<3 { servers.append(try await Task.detached { try ServerProcess(config: config, database: database) }.value) }
            let balancer = Balancer()
            for (index, server) in servers.enumerated() { balancer.set(index, port: server.port) }
            let (balancerPort, balancerTask) = try await Self.startBalancer(balancer)
            defer {
                balancerTask.cancel()
                for server in servers { server.kill() }
            }

            // 60 customers buy; each one's app submits the purchase through an instance in turn.
            let customers = (0..<60).map { "c\($0)" }
            let purchases = try await simulator.perform { (engine) throws(SimulatorError) in
                var purchases: [(String, String)] = []
                for (index, customer) in customers.enumerated() {
                    try engine.createCustomer(id: customer)
                    let result = try engine.purchase(.init(customerId: customer, productId: index % 2 == 0 ? "coins.100" : "pro.monthly"))
                    purchases.append((customer, result.signedTransaction))
                }
                var faults = FaultConfiguration()
                faults.duplicateNextNotifications = 25
                faults.reorderNotifications = true
                engine.setFaults(faults)
                engine.setNotificationURL("http://127.0.0.1:\(balancerPort)/appstore/notifications")
                return purchases
            }
            for (index, (customer, jws)) in purchases.enumerated() {
                let (status, body) = try await Self.request(
                    .POST, port: servers[index % 3].port, "/v1/customers/\(customer)/transactions", body: #"{"signedTransaction": "\#(jws)"}"#
                )
                #expect(status == 200, "\(body)")
            }
            let total = await simulator.state.notifications.count

            // The burst, spread over the three; the second instance is killed partway and restarted.
            let deliverer = NotificationDeliverer(
                simulator: simulator, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), timeout: .seconds(10))
            async let delivered = deliverer.deliverDue()
            try await CrashRecoveryTests.waitForAttempts(on: simulator, atLeast: 20)
            servers[1].kill()
            servers[1] = try await Task.detached { try ServerProcess(config: config, database: database) }.value
            balancer.set(1, port: servers[1].port)
            _ = await delivered
            for _ in 0..<6 where await simulator.state.notifications.contains(where: { $0.sendAttempts.last?.sendAttemptResult != "SUCCESS" }) {
                _ = try await simulator.perform { (engine) throws(SimulatorError) in try engine.advance(by: 3_600) }
                await deliverer.deliverDue()
            }
            let notifications = await simulator.state.notifications
            #expect(notifications.allSatisfy { $0.sendAttempts.last?.sendAttemptResult == "SUCCESS" })

            // Nothing applied twice: each notification once, whatever the duplicates and the retries after the kill.
            let store = try await PostgresLedgerStore.open(try PostgresDatabaseURL(database))
            let counts = try await store.notificationCounts()
            #expect((counts["applied"] ?? 0) + (counts["recorded"] ?? 0) == total, "\(counts), \(total) sent")
            await store.close()

            // Every customer equals the ground truth, on every instance (which warms every cache).
            var truth = try await Self.truth(simulator)
            for customer in customers {
                for server in servers {
                    #expect(try await Self.entitlements(customer, port: server.port) == truth[customer], "\(customer) on :\(server.port)")
                }
            }

            // Refunds written through one instance reach the others' cached answers (not after their 60 s cache age).
            let refunded = Array(customers.prefix(6))
            _ = try await simulator.perform { (engine) throws(SimulatorError) in
                for customer in refunded {
                    let id = engine.state.transactions.values.first { $0.customerId == customer }!.info.transactionId
                    try engine.refund(transactionId: id)
                }
                var faults = FaultConfiguration()
                faults.reorderNotifications = false
                engine.setFaults(faults)
            }
            await deliverer.deliverDue()
            truth = try await Self.truth(simulator)
            var slowest = Duration.zero
            for customer in refunded {
                for server in servers {
                    let started = ContinuousClock.now
                    var answer = try await Self.entitlements(customer, port: server.port)
                    while answer != truth[customer], ContinuousClock.now - started < .seconds(20) {
                        try await Task.sleep(for: .milliseconds(5))
                        answer = try await Self.entitlements(customer, port: server.port)
                    }
                    slowest = max(slowest, ContinuousClock.now - started)
                    #expect(answer == truth[customer], "\(customer) on :\(server.port) still answers \(answer) after a refund")
                }
            }
            // Without the invalidation the cached answers would stay for their 60 s; the bound leaves room for a stalled
            // machine (the answer normally follows within milliseconds).
            #expect(slowest < .seconds(20), "the slowest instance took \(slowest) to follow a write")
        }
    }

    @Test("three serve processes and one scheduled job: one holds its lease; SIGKILLed, another takes the job over within the lease and a check")
    func leaseHolderKilled() async throws {
        let directory = TestFiles.directory.appendingPathComponent("pg-lease-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Raw-payload retention is a leased job every instance schedules; its lease lasts 6 s here (`jobs.leaseSeconds`).
        let (_, config) = try Self.setUp(in: directory) {
            $0["retention"] = ["rawPayloadDays": 30]
            $0["jobs"] = ["leaseSeconds": 6]
        }
        let database = try await Self.newDatabase()
        try await Self.droppingAfterwards(database) {
            var servers: [ServerProcess] = []
            for _ in 0..<3 { servers.append(try await Task.detached { try ServerProcess(config: config, database: database) }.value) }
            defer { for server in servers { server.kill() } }
            let store = try await PostgresLedgerStore.open(try PostgresDatabaseURL(database))
            let pid: (String) -> Int32? = { holder in
                // host/pid/suffix/scope
                let parts = holder.split(separator: "/")
                return parts.count == 4 ? Int32(parts[1]) : nil
            }

            // One of the three holds it, and it stays with that one while it lives.
            var holder: String? = nil
            let started = ContinuousClock.now
            while holder == nil, ContinuousClock.now - started < .seconds(30) {
                holder = try await store.leaseHolder("retention")
                if holder == nil { try await Task.sleep(for: .milliseconds(200)) }
            }
            let first = try #require(holder, "no instance took the retention job's lease")
            let index = try #require(servers.firstIndex { $0.process.processIdentifier == pid(first) }, "\(first) is none of the three")
            try await Task.sleep(for: .seconds(2))
            #expect(try await store.leaseHolder("retention") == first)

            // Its holder dies without giving it back: the lease lapses (6 s after its last renewal, at most 2 s before
            // the kill) and the next check of another instance (every 2 s) takes it.
            servers[index].kill()
            let killed = ContinuousClock.now
            var next: String? = first
            while next == first || next == nil, ContinuousClock.now - killed < .seconds(120) {
                try await Task.sleep(for: .milliseconds(500))
                next = try await store.leaseHolder("retention")
            }
            let waited = ContinuousClock.now - killed
            let taker = try #require(next.flatMap(pid), "the lease was not taken over within 120 s (holder: \(next ?? "none"))")
            let living = servers.enumerated().filter { $0.offset != index }.map { $0.element.process.processIdentifier }
            #expect(living.contains(taker), "taken by \(next ?? "?"), not one of the living instances")
            // Bound: the lease's 6 s plus one 2 s check, and room for a stalled machine (the default lease, 60 s,
            // would not pass).
            #expect(waited < .seconds(30), "took \(waited)")
            await store.close()
        }
    }
}
