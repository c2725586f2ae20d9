import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Logging
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Synchronization
import Testing

/// The use cases of `StorekeeperCore` on their own, without HTTP.
@Suite("Use cases")
struct UseCaseTests {
    typealias H = SimulatorFixture
    static let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)
    static let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func store() throws -> SQLiteLedgerStore {
        try SQLiteLedgerStore(path: TestFiles.directory.appendingPathComponent("use-case-\(UUID()).sqlite").path)
    }

    @Test(
        "the ingester applies a verified notification, acknowledges its duplicate, and refuses (keeping a record of) forged, misdirected and malformed ones"
    )
    func ingester() async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        _ = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let genuine = harness.engine.state.notifications[0].signedPayload
        let store = try Self.store()
        let ingester = NotificationIngester(
            store: store, verifiers: [Self.app: harness.verifier], refusalsKept: 10, logger: Self.logger, refusalStatus: { _ in 400 })
        guard case .stored(.applied, _) = await ingester.ingest(signedPayload: genuine) else {
            Issue.record("not applied")
            return
        }
        guard case .stored(.duplicate, _) = await ingester.ingest(signedPayload: genuine) else {
            Issue.record("not a duplicate")
            return
        }
        let impostor = try TestCertificateAuthority.generate().makeSigner()
        let forged = try impostor.sign(try UnverifiedJWS.unsafeDecodePayload(genuine, as: NotificationPayload.self))
        let otherApp = try impostor.sign(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString, data: NotificationData(bundleId: "com.other", environment: .sandbox)
            ))
        let noClaims = try impostor.sign(NotificationPayload(notificationType: .test, notificationUUID: UUID().uuidString))
        for (jws, kind, code) in [
            (forged, NotificationRefusal.Kind.unverifiable, "untrusted-root"), (otherApp, .misdirected, "unknown-app-or-environment"),
            (noClaims, .malformed, "malformed-payload"), ("a.b.c", .malformed, "invalid-base64url"),
        ] {
            guard case .refused(let refusal) = await ingester.ingest(signedPayload: jws) else {
                Issue.record("\(code) not refused")
                continue
            }
            #expect(refusal.kind == kind && refusal.code == code, "\(refusal)")
        }
        #expect(try await store.notificationCounts() == ["applied": 1, "rejected": 4])
    }

    @Test("the submitter links a customer's transaction, refuses one whose token is another's, and rejects another app's")
    func submitter() async throws {
        var harness = H()
        let token = LowercaseUUID(UUID())
        for customer in ["alice", "eve"] { try harness.engine.createCustomer(id: customer) }
        let alices = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly", appAccountToken: token))
        let eves = try harness.engine.purchase(.init(customerId: "eve", productId: "coins.100", appAccountToken: token))
        let submitter = TransactionSubmitter(store: try Self.store(), verifiers: [Self.app: harness.verifier], logger: Self.logger)
        guard case .linked(let verified) = await submitter.submit(alices.signedTransaction, customerId: "alice", forApp: "com.example.storekeeper")
        else {
            Issue.record("not linked")
            return
        }
        #expect(verified.payload.transactionId == alices.transactionId)
        guard case .refused(let conflict) = await submitter.submit(eves.signedTransaction, customerId: "eve", forApp: nil) else {
            Issue.record("not refused")
            return
        }
        #expect(conflict.kind == .appAccountToken)
        guard case .rejected(let rejection) = await submitter.submit(alices.signedTransaction, customerId: "alice", forApp: "com.other") else {
            Issue.record("not rejected")
            return
        }
        #expect(rejection.kind == .forbidden && rejection.code == "bundle-id-mismatch")
    }

    /// alice's subscription submitted to a new store, and a reader over it counting the answers it renders.
    static func aliceAndReader() async throws -> (H, LifecycleEngine.PurchaseResult, SQLiteLedgerStore, CustomerReader<CustomerAnswer>, Counter) {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let store = try Self.store()
        _ = try await store.submit(try await harness.verifier.verifyTransaction(purchase.signedTransaction), customerId: "alice")
        let renders = Counter()
        let reader = CustomerReader<CustomerAnswer>(
            store: store, configuration: H.entitlements, cache: CustomerCache(capacity: 10, maxAge: 60), logger: Self.logger,
            render: { answer in
                renders.add()
                return answer
            }
        )
        return (harness, purchase, store, reader, renders)
    }

    @Test("the reader answers from the ledger, then from its cache until a write changes the customer; an unknown customer is unknown")
    func reader() async throws {
        let (harness, purchase, store, reader, renders) = try await Self.aliceAndReader()
        let now = harness.engine.state.now
        guard case .found(let first) = await reader.read("alice", bundleId: "com.example.storekeeper", environment: .sandbox, now: { now }) else {
            Issue.record("alice not found")
            return
        }
        let expires = harness.engine.state.transactions[purchase.transactionId]?.info.expiresDate
        #expect(first.entitlements.map(\.productId) == ["pro.monthly"] && first.validUntil == expires)
        _ = await reader.read("alice", bundleId: "com.example.storekeeper", environment: .sandbox, now: { now })
        #expect(renders.value == 1, "the second read was a cache hit")
        _ = try await store.apply(try await harness.verifiedNotifications()[0])
        _ = await reader.read("alice", bundleId: "com.example.storekeeper", environment: .sandbox, now: { now })
        #expect(renders.value == 2, "a write about alice dropped her answer")
        guard case .unknownCustomer = await reader.read("bob", bundleId: "com.example.storekeeper", environment: .sandbox, now: { now }) else {
            Issue.record("bob is not unknown")
            return
        }
        guard case .unknownCustomer = await reader.read("alice", bundleId: "com.other", environment: .sandbox, now: { now }) else {
            Issue.record("alice is known to another app")
            return
        }
    }

    @Test("while the change feed may miss writes (another instance's channel down) the reader never caches; everything cached is dropped")
    func readerWithIncompleteFeed() async throws {
        let (harness, _, store, reader, renders) = try await Self.aliceAndReader()
        let now = harness.engine.state.now
        let read = { _ = await reader.read("alice", bundleId: "com.example.storekeeper", environment: .sandbox, now: { now }) }
        await read()
        await read()
        #expect(renders.value == 1, "cached while the feed hears every write")
        store.changes.setComplete(false)
        await read()
        await read()
        #expect(renders.value == 3, "every read from the ledger while the feed may miss writes")
        store.changes.setComplete(true)
        await read()
        await read()
        #expect(renders.value == 4, "cached again once the feed hears every write")
        store.changes.publishEveryone()
        await read()
        #expect(renders.value == 5, "an announcement about everyone drops every answer")
    }

    @Test("reconciliation never overwrites newer ledger data with an older App Store answer, and finds no drift in it")
    func olderSnapshotChangesNothing() async throws {
        var harness = H()
        try harness.engine.createCustomer(id: "bob")
        let purchase = try harness.engine.purchase(.init(customerId: "bob", productId: "unlock.lifetime"))
        // What the API said an hour after the purchase, before the refund.
        try harness.engine.advance(by: 3_600)
        let older = AppStoreSnapshot(transactions: [
            try await harness.verifier.verifyTransaction(try harness.engine.signTransaction(purchase.transactionId))
        ])
        try harness.engine.advance(by: 3_600)
        try harness.engine.refund(transactionId: purchase.transactionId)
        let store = try Self.store()
        _ = try await store.submit(try await harness.verifier.verifyTransaction(purchase.signedTransaction), customerId: "bob")
        for notification in try await harness.verifiedNotifications() { _ = try await store.apply(notification) }
        let key = LedgerKey(.sandbox, purchase.originalTransactionId)
        let before = try await store.ledger(families: [key])
        #expect(before.transactions.values.first?.info.revocationDate != nil)
        #expect(Drift.between(before, and: older).isEmpty)
        #expect(try await store.applySnapshot(older) == 0)
        #expect(try await store.ledger(families: [key]) == before)
        // A newer answer that says the same finds no drift either.
        try harness.engine.advance(by: 60)
        let newer = AppStoreSnapshot(transactions: [
            try await harness.verifier.verifyTransaction(try harness.engine.signTransaction(purchase.transactionId))
        ])
        #expect(Drift.between(before, and: newer).isEmpty)
    }

    @Test("the ledger's unit of work runs on any backend: an in-memory one ends where the reference model does")
    func unitOfWorkInMemory() async throws {
        var harness = H()
        try await harness.play("subscriber-lifecycle")
        var reference = Ledger()
        let memory = InMemoryTransaction()
        for (transaction, customer) in try await harness.appSubmissions() {
            #expect(try LedgerUnitOfWork.submit(transaction, customerId: customer, in: memory).outcome == .linked)
            reference.apply(transaction.payload, jws: transaction.jws, source: "app")
            try reference.link(transaction.payload, to: customer)
        }
        for notification in try await harness.verifiedNotifications() {
            #expect(try LedgerUnitOfWork.apply(notification, in: memory).outcome == .applied)
            #expect(try LedgerUnitOfWork.apply(notification, in: memory).outcome == .duplicate)
            reference.apply(notification)
        }
        let held = memory.ledger.withLock { $0 }
        #expect(held.transactions == reference.transactions && held.subscriptions == reference.subscriptions)
        #expect(held.explicitLinks == reference.explicitLinks && held.tokenOwners == reference.tokenOwners)
        #expect(Set(held.notifications.keys) == Set(reference.notifications.keys))
    }
}

extension UseCaseTests {
    @Test("notifications applied together, with repeats and ones already held, end where applying them one by one does")
    func applyingTogether() async throws {
        var harness = H()
        try await harness.play("subscriber-lifecycle")
        let notifications = try await harness.verifiedNotifications()
        var reference = Ledger()
        for notification in notifications { reference.apply(notification) }
        let memory = InMemoryTransaction()
        // The first notification alone first, so that the first batch holds one the ledger already has.
        _ = try LedgerUnitOfWork.apply(notifications[0], in: memory)
        var answers: [String: [ApplyOutcome]] = [:]
        for start in stride(from: 0, to: notifications.count, by: 5) {
            let batch = Array(notifications[start..<min(start + 5, notifications.count)])
            let repeated = batch + [batch[0]]
            let result = try LedgerUnitOfWork.applyingTogether(repeated).run(in: memory)
            #expect(result.outcomes.count == repeated.count)
            for (notification, outcome) in zip(repeated, result.outcomes) {
                answers[notification.payload.notificationUUID, default: []].append(outcome)
            }
        }
        // Each UUID: one application (the first delivery), then duplicates; the one applied alone first: duplicates only.
        #expect(answers[notifications[0].payload.notificationUUID]?.allSatisfy { $0 == .duplicate } == true)
        for notification in notifications.dropFirst() {
            let outcomes = answers[notification.payload.notificationUUID] ?? []
            #expect(outcomes.first != .duplicate && outcomes.dropFirst().allSatisfy { $0 == .duplicate }, "\(outcomes)")
        }
        let held = memory.ledger.withLock { $0 }
        #expect(held.transactions == reference.transactions && held.subscriptions == reference.subscriptions)
        #expect(held.explicitLinks == reference.explicitLinks && Set(held.notifications.keys) == Set(reference.notifications.keys))
        #expect(held.notifications.mapValues(\.outcome) == reference.notifications.mapValues(\.outcome))
    }
}

/// Counts calls from any thread.
final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
