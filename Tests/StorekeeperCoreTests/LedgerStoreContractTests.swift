import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import HashTreeCollections
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperTesting
import Synchronization
import Testing

@Suite("Ledger stores: contract", .dropsTestDatabases)
struct LedgerStoreContractTests {
    typealias H = SimulatorFixture

    @Test(
        "shipped scenarios through the store end with the simulator's ground truth", arguments: Backend.available,
        ["subscriber-lifecycle", "refunds", "family-sharing", "plan-changes"])
    func scenarios(backend: Backend, name: String) async throws {
        var harness = H()
        try await harness.play(name)
        let store = try await backend.makeStore()
        try await harness.submitAll(to: store)
        for notification in try await harness.verifiedNotifications() { _ = try await store.apply(notification) }
        let engine = EntitlementEngine(configuration: H.entitlements)
        for truth in harness.engine.groundTruth() {
            let ledger = try await store.ledger(for: truth.customerId, bundleId: "com.example.storekeeper", environment: .sandbox)
            let state = engine.state(of: truth.customerId, in: ledger, environment: .sandbox, at: harness.engine.state.now)
            #expect(state.entitledProductIds == truth.entitlements.map(\.productId).sorted(), "\(name) \(truth.customerId)")
            #expect(state.consumableBalance == truth.consumableBalance)
        }
    }

    @Test("a ledger secret is made once: the first caller's is kept, and every later or racing caller gets it", arguments: Backend.available)
    func ledgerSecrets(backend: Backend) async throws {
        let store = try await backend.makeStore()
        let first = (0..<32).map { UInt8($0) }
        let second = (0..<32).map { UInt8(255 - $0) }
        #expect(try await store.ledgerSecret("events.cursor", orNew: first) == first)
        #expect(try await store.ledgerSecret("events.cursor", orNew: second) == first, "the first one stays")
        #expect(try await store.ledgerSecret("other", orNew: second) == second, "each name its own")
        if let sqlite = store as? SQLiteLedgerStore {
            #expect(try await sqlite.ledgerSecrets() == ["events.cursor": first, "other": second])
        }
        // Racing first uses: one wins, every caller gets the winner's. On PostgreSQL, several instances of one database.
        var racing: [any LedgerStore] = [try await backend.makeStore()]
        if backend == .postgres {
            let url = try await PostgresTestDatabase.create()
            racing = [try await PostgresLedgerStore.open(url), try await PostgresLedgerStore.open(url), try await PostgresLedgerStore.open(url)]
        }
        let stores = racing
        let answers = try await withThrowingTaskGroup(of: [UInt8].self) { group in
            for index in 0..<9 {
                group.addTask { try await stores[index % stores.count].ledgerSecret("raced", orNew: Array(repeating: UInt8(index), count: 32)) }
            }
            return try await group.reduce(into: Set<[UInt8]>()) { $0.insert($1) }
        }
        #expect(answers.count == 1)
        for store in stores { await (store as? PostgresLedgerStore)?.close() }
    }

    @Test(
        "an audit record appended unless one like it was done since a time: of racing claims one appends, the others are told when it was",
        arguments: Backend.available)
    func supportActionClaims(backend: Backend) async throws {
        var racing: [any LedgerStore] = [try await backend.makeStore()]
        if backend == .postgres {
            let url = try await PostgresTestDatabase.create()
            racing = [try await PostgresLedgerStore.open(url), try await PostgresLedgerStore.open(url), try await PostgresLedgerStore.open(url)]
        }
        let stores = racing
        let customer = CustomerKey(bundleId: "com.example.storekeeper", environment: .sandbox, customerId: "bob")
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        func action(_ target: String, outcome: String = "done", at: Date = at) -> SupportAction {
            SupportAction(
                at: at, keyName: "app", customer: customer, action: "sign-offer", target: target, request: [:], outcome: outcome, detail: [:])
        }
        let claims = try await withThrowingTaskGroup(of: SupportActionClaim.self) { group in
            for index in 0..<9 {
                group.addTask {
                    try await stores[index % stores.count].recordSupportAction(action("winback"), unlessDoneSince: at.addingTimeInterval(-86_400))
                }
            }
            return try await group.reduce(into: [SupportActionClaim]()) { $0.append($1) }
        }
        #expect(claims.filter { if case .recorded = $0 { true } else { false } }.count == 1, "\(claims)")
        #expect(claims.filter { $0 == .alreadyDone(at: at) }.count == 8, "\(claims)")
        let store = stores[0]
        // Another target, a refusal, and a claim after the window are not in the way.
        if case .alreadyDone = try await store.recordSupportAction(action("promo"), unlessDoneSince: at) { Issue.record("another target") }
        _ = try await store.recordSupportAction(action("half", outcome: "refused"))
        if case .alreadyDone = try await store.recordSupportAction(action("half"), unlessDoneSince: at) { Issue.record("a refusal") }
        let later = at.addingTimeInterval(2 * 86_400)
        if case .alreadyDone = try await store.recordSupportAction(action("winback", at: later), unlessDoneSince: later.addingTimeInterval(-86_400)) {
            Issue.record("a claim older than the window")
        }
        let kept = try await store.supportActions(customer: customer)
        #expect(kept.filter { $0.target == "winback" }.count == 2 && kept.count == 5, "\(kept)")
        for store in stores { await (store as? PostgresLedgerStore)?.close() }
    }

    @Test("any order of the same notifications, each twice, leaves the same customer ledger", arguments: Backend.available)
    func orderIndependence(backend: Backend) async throws {
        var harness = H()
        try await harness.play("subscriber-lifecycle")
        let notifications = try await harness.verifiedNotifications()
        let submissions = try await harness.appSubmissions()
        var reference: Ledger? = nil
        var generator = SystemRandomNumberGenerator()
        for round in 0..<12 {
            let order = round == 0 ? Array(notifications.indices) : Array(notifications.indices).shuffled(using: &generator)
            let store = try await backend.makeStore()
            for (transaction, customer) in submissions { _ = try await store.submit(transaction, customerId: customer) }
            for index in order + order.reversed() { _ = try await store.apply(notifications[index]) }
            let ledger = try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox)
            if let reference {
                #expect(Ledger.differences(ledger, reference).isEmpty, "order \(order): \(Ledger.differences(ledger, reference))")
            } else {
                reference = ledger
            }
            let counts = try await store.notificationCounts()
            #expect(counts["applied"] == notifications.count)
        }
    }

    @Test("duplicates are acknowledged and change nothing; refused notifications are kept for audit", arguments: Backend.available)
    func duplicatesAndAudit(backend: Backend) async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "coins.100"))
        _ = try harness.engine.requestTestNotification(bundleId: "com.example.storekeeper")
        let notifications = try await harness.verifiedNotifications()
        let store = try await backend.makeStore()
        #expect(try await store.apply(notifications[0]) == .applied)
        #expect(try await store.apply(notifications[0]) == .duplicate)
        #expect(try await store.apply(notifications[1]) == .recorded)
        let refusal = RefusedNotification(
            input: Array("garbage".utf8), receivedAt: Date(), code: "malformed-jws", message: "not a JWS", status: 400, claims: nil
        )
        try await store.recordRefused(refusal, keeping: 10)
        #expect(try await store.notificationCounts() == ["applied": 1, "recorded": 1, "rejected": 1])
        #expect(try await store.customerExists("alice", bundleId: "com.example.storekeeper", environment: .sandbox) == false)
        try await harness.submitAll(to: store)
        #expect(try await store.customerExists("alice", bundleId: "com.example.storekeeper", environment: .sandbox))
        // Known in the app and environment of their purchases only.
        #expect(try await store.customerExists("alice", bundleId: "com.example.other", environment: .sandbox) == false)
        #expect(try await store.customerExists("alice", bundleId: "com.example.storekeeper", environment: .production) == false)
        try await store.checkHealth()
    }

    @Test(
        "a storage failure mid-notification leaves no partial change; the retry applies fully", arguments: Backend.available,
        ["after-apply", "before-commit"])
    func failureMidNotification(backend: Backend, point: String) async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let notification = try #require(try await harness.verifiedNotifications().first)
        struct Injected: Error {}
        let failing = FailOnce(point: point)
        let store = try await backend.makeStore(unsafeFaultInjection: { try failing.check($0) })
        try await harness.submitAll(to: store)
        let before = try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox)
        await #expect(throws: StorageError.self) { try await store.apply(notification) }
        #expect(try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox) == before)
        #expect(try await store.notificationCounts()["applied"] == nil)
        #expect(try await store.apply(notification) == .applied)
        let after = try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox)
        #expect(after.subscriptions.values.first?.status == .active)
        #expect(after.subscriptions.values.first?.renewalInfo != nil)
    }
}

/// Throws once at a named point, then never again.
final class FailOnce: Sendable {
    struct Injected: Error {}
    let point: String
    private let fired = Mutex(false)

    init(point: String) { self.point = point }

    func check(_ name: String) throws {
        guard name == point else { return }
        let shouldFail = fired.withLock { fired in
            defer { fired = true }
            return !fired
        }
        if shouldFail { throw Injected() }
    }
}
