import AppStoreModels
import AppStoreSimulator
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

/// The server catches up on its own: notifications it missed come back through Get Notification History.
@Suite("Storekeeper server: notification recovery")
struct RecoveryTests {
    typealias T = RecoveryTestbed

    /// alice subscribes, bob buys a lifetime unlock, carol coins with her app account token; each app submits.
    static func firstPurchases(_ testbed: T, at base: String) async throws -> LowercaseUUID {
        let token = LowercaseUUID(UUID())
        let purchases = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            for customer in ["alice", "bob", "carol"] { try engine.createCustomer(id: customer) }
            return [
                ("alice", try engine.purchase(.init(customerId: "alice", productId: "pro.monthly")).signedTransaction),
                ("bob", try engine.purchase(.init(customerId: "bob", productId: "unlock.lifetime")).signedTransaction),
                ("carol", try engine.purchase(.init(customerId: "carol", productId: "coins.100", appAccountToken: token)).signedTransaction),
            ]
        }
        for (customer, jws) in purchases { #expect(try await T.submit(jws, for: customer, to: base) == 200) }
        return token
    }

    /// While the server is down: bob is refunded, alice turns auto-renew off, carol buys coins twice with her token.
    static func whileDown(_ testbed: T, token: LowercaseUUID) async throws -> Set<String> {
        let before = Set(await testbed.simulator.state.notifications.map(\.notificationUUID))
        try await testbed.act { (engine) throws(SimulatorError) in
            let bobs = engine.state.transactions.records(of: "bob").first!.info.transactionId
            try engine.refund(transactionId: bobs)
            let alices = engine.state.subscriptions.records(of: "alice").first!.originalTransactionId
            try engine.setAutoRenew(originalTransactionId: alices, enabled: false)
            for _ in 0..<2 { _ = try engine.purchase(.init(customerId: "carol", productId: "coins.100", appAccountToken: token)) }
        }
        return Set(await testbed.simulator.state.notifications.map(\.notificationUUID)).subtracting(before)
    }

    /// How many delivery attempts each of these notifications had, each counted only once it is given up (failed,
    /// nothing more due).
    static func attemptCounts(_ testbed: T, of uuids: Set<String>) async -> [Int] {
        let records = await testbed.simulator.state.notifications.filter { uuids.contains($0.notificationUUID) }
        return records.map { record -> Int in record.nextAttemptAt == nil && record.isFailure ? record.sendAttempts.count : -1 }
    }

    @Test(
        "sandbox: notifications sent while the server was down are never retried; after restart the recovery job brings every customer to the ground truth, with no redelivery"
    )
    func sandboxOutage() async throws {
        let testbed = try await T(environment: .sandbox)
        try await testbed.withSimulator { simulatorURL in
            let configuration = try testbed.configuration(baseURL: simulatorURL)
            let token = Carry(LowercaseUUID(UUID()))
            try await testbed.withServer(configuration) { base in
                token.value = try await Self.firstPurchases(testbed, at: base)
                #expect(try await testbed.converged(at: base).isEmpty)
            }
            let missed = try await Self.whileDown(testbed, token: token.value)
            #expect(missed.count >= 4)
            let attempts = await testbed.simulator.state.notifications.filter { missed.contains($0.notificationUUID) }.map(\.sendAttempts)
            #expect(attempts.allSatisfy { $0.count == 1 && $0[0].sendAttemptResult != "SUCCESS" }, "\(attempts)")
            try await testbed.withServer(configuration) { base in
                let left = try await testbed.converged(at: base)
                #expect(left.isEmpty, "\(left)")
            }
            // Nothing was delivered again: the missed notifications still have their one failed attempt.
            let after = await testbed.simulator.state.notifications.filter { missed.contains($0.notificationUUID) }.map(\.sendAttempts.count)
            #expect(after.allSatisfy { $0 == 1 })
            let store = try SQLiteLedgerStore(path: testbed.database)
            for uuid in missed { #expect(try await store.containsNotification(uuid)) }
            #expect(try await store.recoveryWatermark(VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)) != nil)
        }
    }

    @Test("production: a server down past Apple's last retry (and 72 hours more) is recovered")
    func productionPastLastRetry() async throws {
        let testbed = try await T(environment: .production)
        try await testbed.withSimulator { simulatorURL in
            let configuration = try testbed.configuration(baseURL: simulatorURL)
            let token = Carry(LowercaseUUID(UUID()))
            try await testbed.withServer(configuration) { base in
                token.value = try await Self.firstPurchases(testbed, at: base)
                #expect(try await testbed.converged(at: base).isEmpty)
            }
            let missed = try await Self.whileDown(testbed, token: token.value)
            // 1 + 12 + 24 + 48 + 72 hours of retries, then three more days.
            try await testbed.advance(by: (157 + 73) * 3_600)
            let counts = await Self.attemptCounts(testbed, of: missed)
            #expect(counts == Array(repeating: 6, count: missed.count), "\(counts)")
            try await testbed.withServer(configuration) { base in
                let left = try await testbed.converged(at: base)
                #expect(left.isEmpty, "\(left)")
            }
        }
    }

    @Test("misconfiguration: notifications refused with a wrong trusted root come back, after the fix, through onlyFailures")
    func wrongRootFixed() async throws {
        let testbed = try await T(environment: .sandbox)
        try await testbed.withSimulator { simulatorURL in
            // The server trusts Apple's root instead of the simulator's: it refuses everything, the recovery job too.
            let wrong = try testbed.configuration(baseURL: simulatorURL, root: "apple")
            let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)
            let submissions = Carry<[(String, String)]>([])
            try await testbed.withServer(wrong) { base in
                let purchases = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                    for customer in ["alice", "bob"] { try engine.createCustomer(id: customer) }
                    let alice = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
                    let bob = try engine.purchase(.init(customerId: "bob", productId: "unlock.lifetime"))
                    try engine.refund(transactionId: bob.transactionId)
                    try engine.setAutoRenew(originalTransactionId: alice.originalTransactionId, enabled: false)
                    return [("alice", alice.signedTransaction), ("bob", bob.signedTransaction)]
                }
                submissions.value = purchases
                await testbed.deliverer.deliverDue()
                #expect(try await T.submit(purchases[0].1, for: "alice", to: base) == 400)
                // Two hours on, the watermark has moved past the refused notifications.
                try await testbed.advance(by: 7_200)
                let store = try SQLiteLedgerStore(path: testbed.database)
                let deadline = ContinuousClock.now + .seconds(20)
                while try await (store.recoveryWatermark(app) ?? .distantPast) < testbed.clock.now, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(try await store.recoveryWatermark(app) == testbed.clock.now)
                #expect(try await store.notificationCounts()["applied"] == nil)
            }
            let refused = await testbed.simulator.state.notifications.filter { $0.isFailure }.count
            #expect(refused >= 4)
            // Fixed and restarted: the apps submit again, and the refused notifications come back from the failures.
            try await testbed.withServer(try testbed.configuration(baseURL: simulatorURL)) { base in
                for (customer, jws) in submissions.value { #expect(try await T.submit(jws, for: customer, to: base) == 200) }
                let left = try await testbed.converged(at: base)
                #expect(left.isEmpty, "\(left)")
                let alice = try await T.call(.GET, base + "/v1/customers/alice?environment=Sandbox", key: T.appKey)
                let entitlement = (alice.json["entitlements"] as? [[String: Any]])?.first
                #expect(entitlement?["willRenew"] as? Bool == false, "\(alice.json)")
            }
        }
    }
}

/// A value a test hands out of a `@Sendable` closure.
final class Carry<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { storage = Mutex(value) }
    var value: Value {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}
