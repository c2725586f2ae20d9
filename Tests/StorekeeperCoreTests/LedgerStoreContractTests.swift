import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import HashTreeCollections
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import Testing

/// The same cases against every storage backend: SQLite, and PostgreSQL when `STOREKEEPER_TEST_POSTGRES_URL` is set
/// (``PostgresStoreTests`` says when it is skipped).
enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    /// The backends these tests can reach.
    static var available: [Backend] { PostgresTestDatabase.url == nil ? [.sqlite] : [.sqlite, .postgres] }

    func makeStore(unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil) async throws -> any LedgerStore {
        switch self {
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID()).sqlite").path
            return try SQLiteLedgerStore(path: path, unsafeFaultInjection: unsafeFaultInjection)
        case .postgres:
            return try await PostgresTestDatabase.openStore(unsafeFaultInjection: unsafeFaultInjection)
        }
    }
}

@Suite("Ledger stores: contract", .dropsTestDatabases)
struct LedgerStoreContractTests {
    typealias H = LedgerHarness

    /// What every customer's app submits (StoreKit 2 hands the app its signed transactions), signed once.
    static func appSubmissions(_ harness: LedgerHarness) async throws -> [(VerifiedSignedData<TransactionInfo>, String)] {
        var submissions: [(VerifiedSignedData<TransactionInfo>, String)] = []
        for record in harness.engine.state.transactions.values.sorted(by: { $0.info.transactionId < $1.info.transactionId }) {
            let signed = try harness.engine.signTransaction(record.info.transactionId)
            submissions.append((try await harness.verifier.verifyTransaction(signed), record.customerId))
        }
        return submissions
    }

    static func submitAll(_ harness: LedgerHarness, to store: any LedgerStore) async throws {
        for (transaction, customer) in try await appSubmissions(harness) {
            _ = try await store.submit(transaction, customerId: customer)
        }
    }

    @Test("shipped scenarios through the store end with the simulator's ground truth", arguments: Backend.available, ["subscriber-lifecycle", "refunds", "family-sharing", "plan-changes"])
    func scenarios(backend: Backend, name: String) async throws {
        var harness = try H()
        try await harness.play(name)
        let store = try await backend.makeStore()
        try await Self.submitAll(harness, to: store)
        for notification in try await harness.verifiedNotifications() { _ = try await store.apply(notification) }
        let engine = EntitlementEngine(configuration: H.configuration)
        for truth in harness.engine.groundTruth() {
            let ledger = try await store.ledger(for: truth.customerId, bundleId: "com.example.storekeeper", environment: .sandbox)
            let state = engine.state(of: truth.customerId, in: ledger, environment: .sandbox, at: harness.engine.state.now)
            #expect(state.entitledProductIds == truth.entitlements.map(\.productId).sorted(), "\(name) \(truth.customerId)")
            #expect(state.consumableBalance == truth.consumableBalance)
        }
    }

    @Test("any order of the same notifications, each twice, leaves the same customer ledger", arguments: Backend.available)
    func orderIndependence(backend: Backend) async throws {
        var harness = try H()
        try await harness.play("subscriber-lifecycle")
        let notifications = try await harness.verifiedNotifications()
        let submissions = try await Self.appSubmissions(harness)
        var reference: Ledger? = nil
        var generator = SystemRandomNumberGenerator()
        for round in 0..<12 {
            let order = round == 0 ? Array(notifications.indices) : Array(notifications.indices).shuffled(using: &generator)
            let store = try await backend.makeStore()
            for (transaction, customer) in submissions { _ = try await store.submit(transaction, customerId: customer) }
            for index in order + order.reversed() { _ = try await store.apply(notifications[index]) }
            let ledger = try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox)
            if let reference {
                #expect(Self.differences(ledger, reference).isEmpty, "order \(order): \(Self.differences(ledger, reference))")
            } else {
                reference = ledger
            }
            let counts = try await store.notificationCounts()
            #expect(counts["applied"] == notifications.count)
        }
    }

    /// What differs between two ledgers, briefly (a full dump of a ledger is pages of JWS).
    static func differences(_ a: Ledger, _ b: Ledger) -> [String] {
        var result: [String] = []
        for key in Set(a.transactions.keys).union(b.transactions.keys) where a.transactions[key] != b.transactions[key] {
            let left = a.transactions[key], right = b.transactions[key]
            result.append("transaction \(key): \(left?.source ?? "-")@\(left?.signedDate.epochMilliseconds ?? 0) vs \(right?.source ?? "-")@\(right?.signedDate.epochMilliseconds ?? 0)")
        }
        for key in Set(a.subscriptions.keys).union(b.subscriptions.keys) where a.subscriptions[key] != b.subscriptions[key] {
            let left = a.subscriptions[key], right = b.subscriptions[key]
            result.append("subscription \(key): status \(String(describing: left?.status))@\(left?.statusSignedDate?.epochMilliseconds ?? 0) vs \(String(describing: right?.status))@\(right?.statusSignedDate?.epochMilliseconds ?? 0); renewal \(left?.renewalSignedDate?.epochMilliseconds ?? 0) vs \(right?.renewalSignedDate?.epochMilliseconds ?? 0)")
        }
        if a.explicitLinks != b.explicitLinks { result.append("links") }
        if a.tokenOwners != b.tokenOwners { result.append("tokens") }
        return result
    }

    @Test("duplicates are acknowledged and change nothing; refused notifications are kept for audit", arguments: Backend.available)
    func duplicatesAndAudit(backend: Backend) async throws {
        var harness = try H()
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
        try await Self.submitAll(harness, to: store)
        #expect(try await store.customerExists("alice", bundleId: "com.example.storekeeper", environment: .sandbox))
        // Known in the app and environment of their purchases only.
        #expect(try await store.customerExists("alice", bundleId: "com.example.other", environment: .sandbox) == false)
        #expect(try await store.customerExists("alice", bundleId: "com.example.storekeeper", environment: .production) == false)
        try await store.checkHealth()
    }

    @Test("a storage failure mid-notification leaves no partial change; the retry applies fully", arguments: Backend.available, ["after-apply", "before-commit"])
    func failureMidNotification(backend: Backend, point: String) async throws {
        var harness = try H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let notification = try #require(try await harness.verifiedNotifications().first)
        struct Injected: Error {}
        let failing = FailOnce(point: point)
        let store = try await backend.makeStore(unsafeFaultInjection: { try failing.check($0) })
        try await Self.submitAll(harness, to: store)
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

import Synchronization
