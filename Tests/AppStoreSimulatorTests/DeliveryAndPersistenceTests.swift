import AppStoreModels
import AppStoreSigning
import AsyncHTTPClient
import Foundation
import HashTreeCollections
import Hummingbird
import HummingbirdTesting
import Logging
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

@testable import AppStoreSimulator

/// A notification receiver that answers with a status the test sets, and records what it received.
actor Receiver {
    var status: HTTPResponse.Status = .ok
    var received: [String] = []

    func set(_ status: HTTPResponse.Status) { self.status = status }

    func receive(_ body: String) -> HTTPResponse.Status {
        received.append(body)
        return status
    }

    /// Runs a live server on a port the OS picks and calls `body` with its URL.
    func serve(_ body: @Sendable (String) async throws -> Void) async throws {
        let router = Router()
        router.post("/notifications") { request, _ -> Response in
            let buffer = try await request.body.collect(upTo: 1 << 20)
            return Response(status: await self.receive(String(buffer: buffer)))
        }
        try await Application(router: router).test(.live) { client in
            try await body("http://127.0.0.1:\(client.port!)/notifications")
        }
    }
}

@Suite("Simulator: notification delivery and persistence")
struct DeliveryAndPersistenceTests {
    typealias H = SimulatorFixture

    @Test("a failing receiver gets Apple's retries in production, and history records every attempt")
    func retriesOverHTTP() async throws {
        let receiver = Receiver()
        await receiver.set(.internalServerError)
        var harness = H(environment: .production)
        try harness.customer("alice")
        try harness.buy("alice", "pro.monthly")
        let simulator = Simulator(engine: harness.engine)
        let deliverer = NotificationDeliverer(simulator: simulator, logger: Logger(label: "test"))
        try await receiver.serve { url in
            _ = try await simulator.perform { engine in engine.state.notificationURL = url }
            #expect(await deliverer.deliverDue() == 1)
            #expect(await deliverer.deliverDue() == 0)  // nothing due until the clock moves
            try await simulator.perform { (engine) throws(SimulatorError) in try engine.advance(by: 3600) }
            #expect(await deliverer.deliverDue() == 1)
            await receiver.set(.ok)
            try await simulator.perform { (engine) throws(SimulatorError) in try engine.advance(by: 12 * 3600) }
            #expect(await deliverer.deliverDue() == 1)
        }
        let record = try #require(await simulator.state.notifications.first)
        #expect(record.sendAttempts.map(\.sendAttemptResult) == ["UNSUCCESSFUL_HTTP_RESPONSE_CODE", "UNSUCCESSFUL_HTTP_RESPONSE_CODE", "SUCCESS"])
        #expect(record.nextAttemptAt == nil)
        let bodies = await receiver.received
        #expect(bodies.count == 3)
        let body = try JSONDecoder().decode(NotificationRequestBody.self, from: Data(bodies[0].utf8))
        #expect(try await harness.verifier.verifyNotification(body.signedPayload).payload.notificationType == .subscribed)
    }

    @Test("dropped, duplicated and reordered deliveries; an unreachable receiver is NO_RESPONSE")
    func deliveryFaults() async throws {
        let receiver = Receiver()
        var harness = H()
        try harness.customer("alice")
        for _ in 0..<3 { try harness.buy("alice", "coins.100") }
        let simulator = Simulator(engine: harness.engine)
        _ = try await simulator.perform { engine in
            engine.state.faults.dropNextNotifications = 1
            engine.state.faults.duplicateNextNotifications = 1
            engine.state.faults.reorderNotifications = true
        }
        let deliverer = NotificationDeliverer(simulator: simulator, logger: Logger(label: "test"))
        try await receiver.serve { url in
            _ = try await simulator.perform { engine in engine.state.notificationURL = url }
            #expect(await deliverer.deliverDue() == 3)
        }
        let state = await simulator.state
        let results = state.notifications.map { $0.sendAttempts.map(\.sendAttemptResult) }
        #expect(results == [["SUCCESS"], ["SUCCESS"], ["TIMED_OUT"]])  // the newest went first and was dropped
        #expect(await receiver.received.count == 3)  // one dropped, one sent twice
        #expect(state.faults.dropNextNotifications == 0 && state.faults.duplicateNextNotifications == 0)

        var unreachable = H()
        try unreachable.customer("bob")
        try unreachable.buy("bob", "coins.100")
        let lonely = Simulator(engine: unreachable.engine)
        _ = try await lonely.perform { engine in engine.state.notificationURL = "http://127.0.0.1:1/nothing" }
        // Nobody listens: the attempt fails at once instead of retrying the connection until the 10 s timeout.
        let began = ContinuousClock.now
        await NotificationDeliverer(simulator: lonely, logger: Logger(label: "test")).deliverDue()
        #expect(ContinuousClock.now - began < .seconds(8), "not the 10 s timeout")
        #expect(await lonely.state.notifications[0].sendAttempts.first?.sendAttemptResult == "NO_RESPONSE")
    }

    @Test("init writes a working simulator; a restart keeps its state; its output verifies with ca/root.pem")
    func persistence() async throws {
        let url = TestFiles.directory.appendingPathComponent("simulator-\(UUID())")
        defer { try? FileManager.default.removeItem(at: url) }
        let directory = try SimulatorDirectory.initialize(at: url, now: TestAppStore.start)
        #expect(throws: SimulatorError.self) { try SimulatorDirectory.initialize(at: url) }
        let first = try Simulator(directory: directory)
        let purchase = try await first.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "alice")
            return try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        }
        let restarted = try Simulator(directory: directory)
        let state = await restarted.state
        #expect(state.customers["alice"] != nil)
        #expect(state.transactions[purchase.transactionId]?.info.productId == "pro.monthly")
        #expect(state.notifications.count == 1)
        let root = try Certificate(pemEncoded: try String(contentsOf: directory.rootCertificateFile, encoding: .utf8))
        let verifier = SignedDataVerifier(
            configuration: try .init(
                bundleID: TestAppStore.bundleID, appAppleID: nil, environment: .sandbox, trustedRoots: [root]
            ))
        _ = try await verifier.verifyNotification(state.notifications[0].signedPayload)
        // A restarted simulator signs with a new leaf from the same CA: still trusted.
        let next = try await restarted.perform { (engine) throws(SimulatorError) in
            try engine.purchase(.init(customerId: "alice", productId: "coins.100"))
        }
        _ = try await verifier.verifyTransaction(next.signedTransaction)
        let permissions = try FileManager.default.attributesOfItem(atPath: url.appendingPathComponent("ca/intermediate-key.pem").path)
        #expect((permissions[.posixPermissions] as? NSNumber)?.intValue == 0o600)
    }

    @Test("a running clock follows real time and plays renewals on its own")
    func runningClock() async throws {
        var harness = H(rate: .sandbox5Minutes)
        try harness.customer("alice")
        try harness.buy("alice", "pro.monthly")
        let simulator = Simulator(engine: harness.engine)
        let start = await simulator.state.now
        let deliverer = NotificationDeliverer(simulator: simulator, logger: Logger(label: "test"))
        let ticker = ClockTicker(simulator: simulator, deliverer: deliverer, interval: .milliseconds(20))
        let task = Task { try await ticker.run() }
        try await Task.sleep(for: .milliseconds(200))
        #expect(await simulator.state.now == start)  // manual clock: nothing moves
        let clock = ContinuousClock()
        let began = clock.now
        _ = try await simulator.perform { engine in engine.setClockRunning(true) }
        // Polled rather than slept once, so a starved machine (the ticker not running for a while) cannot fail it.
        var moved = 0.0
        while moved <= 0.1, clock.now - began < .seconds(20) {
            try await Task.sleep(for: .milliseconds(20))
            moved = await simulator.state.now.timeIntervalSince(start)
        }
        let elapsed = clock.now - began
        task.cancel()
        _ = await task.result
        #expect(moved > 0.1)
        // It follows real time: never ahead of the time that passed.
        #expect(moved <= Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18 + 0.1)
    }

    @Test("a broken catalog is refused with the faulty entry named")
    func catalogValidation() throws {
        var catalog = Catalog.sample
        catalog.products[0].level = nil
        let error = #expect(throws: SimulatorError.self) { try catalog.validate() }
        #expect(error?.message.contains("premium.monthly") == true)
        catalog = .sample
        catalog.subscriptionGroups[0].gracePeriodDays = 5
        #expect(throws: SimulatorError.self) { try catalog.validate() }
        catalog = .sample
        catalog.products[7].familyShareable = true  // coins.100
        #expect(throws: SimulatorError.self) { try catalog.validate() }
    }
}
