import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Logging
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperTesting
import Synchronization
import Testing

@Suite("Ledger stores: consumption requests and consents", .dropsTestDatabases)
struct ConsumptionStoreTests {
    typealias H = SimulatorFixture
    static let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)
    /// The customer whose refund ``refundRequested(_:)`` requests.
    static let alice = CustomerKey(bundleId: app.bundleId, environment: .sandbox, customerId: "alice")

    /// alice bought coins and asked for a refund; the store has every notification (the request twice).
    static func refundRequested(_ backend: Backend) async throws -> (store: any LedgerInspection, harness: H, transactionId: String, uuid: String) {
        var harness = H()
        try harness.engine.createCustomer(id: "alice")
        let coins = try harness.engine.purchase(.init(customerId: "alice", productId: "coins.100"))
        try harness.engine.requestRefund(transactionId: coins.transactionId, reason: .unintendedPurchase)
        let store = try await backend.makeStore()
        try await harness.submitAll(to: store)
        let notifications = try await harness.verifiedNotifications()
        for notification in notifications + notifications { _ = try await store.apply(notification) }
        let request = try #require(notifications.first { $0.payload.notificationType == .consumptionRequest })
        return (store, harness, coins.transactionId, request.payload.notificationUUID)
    }

    @Test(
        "the ledger makes one request per CONSUMPTION_REQUEST stored, duplicates included; claims are exclusive until saved or lapsed",
        arguments: Backend.available)
    func claims(backend: Backend) async throws {
        let (store, _, _, uuid) = try await Self.refundRequested(backend)
        let now = Date(epochMilliseconds: Date().epochMilliseconds)
        let claimed = try await store.claimConsumptionRequests(now: now, holder: "one", until: now.addingTimeInterval(60), limit: 10)
        #expect(claimed.map(\.notificationUUID) == [uuid] && claimed.first?.state == .new)
        #expect(try await store.claimConsumptionRequests(now: now, holder: "two", until: now.addingTimeInterval(60), limit: 10).isEmpty)
        var record = try #require(claimed.first)
        record.state = .pending
        record.bundleId = Self.app.bundleId
        record.environment = Self.app.environment
        record.deadline = now.addingTimeInterval(3_600)
        record.nextAttemptAt = now.addingTimeInterval(100)
        record.answer = ConsumptionAnswer(deliveryStatus: .delivered, refundPreference: .decline)
        #expect(try await store.saveConsumptionRequest(record, holder: "two") == false, "not two's claim")
        #expect(try await store.saveConsumptionRequest(record, holder: "one"))
        #expect(try await store.consumptionRequest(uuid) == record)
        // Not due yet; due at its next attempt; a lapsed claim can be taken by another holder.
        #expect(try await store.claimConsumptionRequests(now: now, holder: "two", until: now.addingTimeInterval(60), limit: 10).isEmpty)
        let due = now.addingTimeInterval(101)
        #expect(try await store.claimConsumptionRequests(now: due, holder: "two", until: due.addingTimeInterval(60), limit: 10).count == 1)
        let lapsed = due.addingTimeInterval(61)
        #expect(try await store.claimConsumptionRequests(now: lapsed, holder: "three", until: lapsed.addingTimeInterval(60), limit: 10).count == 1)
        #expect(try await store.saveConsumptionRequest(record, holder: "two") == false, "two's claim lapsed and three took it")
        // Listed for the app (by state) and not for another.
        #expect(try await store.consumptionRequests(.apps([Self.app], states: [.pending], limit: 10)).map(\.notificationUUID) == [uuid])
        #expect(try await store.consumptionRequests(.apps([Self.app], states: [.sent], limit: 10)).isEmpty)
        #expect(
            try await store.consumptionRequests(.apps([VerifierKey(bundleId: "com.example.other", environment: .sandbox)], states: [], limit: 10))
                .isEmpty)
    }

    @Test(
        "the responder decides from the re-verified notification and the ledger: the owner, the facts, consent; a person's answer is taken once; erasure forgets consent",
        arguments: Backend.available)
    func decided(backend: Backend) async throws {
        let (store, harness, transactionId, uuid) = try await Self.refundRequested(backend)
        let alice = Self.alice
        #expect(try await store.consumptionConsent(alice) == nil)
        let at = harness.engine.state.now
        try await store.setConsumptionConsent(ConsumptionConsent(consented: true, at: at), for: alice)
        #expect(try await store.consumptionConsent(alice)?.consented == true)
        let outcomes = Mutex<[String]>([])
        let responder = ConsumptionResponder(
            store: store, verifiers: [Self.app: harness.verifier], clients: [:], policies: [:], holder: "test", now: { at },
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
            outcome: { _, outcome in outcomes.withLock { $0.append(outcome) } })
        #expect(await responder.pass() == 1)
        let decided = try #require(try await store.consumptionRequest(uuid))
        #expect(decided.state == .manual && decided.decidedBy == "policy manual" && decided.customerId == "alice")
        #expect(decided.transactionId == transactionId && decided.productType == .consumable && decided.reason == .unintendedPurchase)
        #expect(decided.facts?.consented == true && decided.facts?.refunds == 0 && decided.facts?.tenureDays == 0)
        #expect(decided.deadline == decided.requestedAt.map { $0.addingTimeInterval(12 * 3_600) })
        #expect(outcomes.withLock { $0 } == ["manual"])
        #expect(try await store.consumptionRequests(.customer(alice)).map(\.notificationUUID) == [uuid])
        #expect(await responder.pass() == 0, "nothing to do until someone answers")

        let answer = ConsumptionAnswer(deliveryStatus: .delivered, refundPreference: .grantFull)
        let answered = try await store.answerConsumptionRequest(uuid, answer: answer, decidedBy: "key support", at: at)
        #expect(answered?.state == .pending && answered?.answer == answer && answered?.decidedBy == "key support")
        #expect(try await store.answerConsumptionRequest(uuid, answer: answer, decidedBy: "key other", at: at) == nil, "answered once")
        // No credentials: it fails, named, and the audit log says so on alice.
        #expect(await responder.pass() == 1)
        let failed = try #require(try await store.consumptionRequest(uuid))
        #expect(failed.state == .failed && failed.lastError?.contains("no serverAPI credentials") == true && failed.finishedAt != nil)
        let actions = try await store.supportActions(customer: alice)
        #expect(actions.map(\.outcome) == ["manual", "failed"] && actions.allSatisfy { $0.action == "consumption-information" })
        #expect(actions.last?.keyName == "support")

        #expect(try await store.erase(alice) != nil)
        #expect(try await store.consumptionConsent(alice) == nil, "erasure forgets consent")
        #expect(try await store.consumptionRequest(uuid)?.customerId == nil, "the request names no one")
        #expect(try await store.consumptionRequests(.customer(alice)).isEmpty)
    }

    @Test(
        "a request waiting for a person when its customer is erased is never sent, even when a new customer of the same ID consents",
        arguments: Backend.available)
    func erasedWhileWaiting(backend: Backend) async throws {
        let (store, harness, _, uuid) = try await Self.refundRequested(backend)
        let at = harness.engine.state.now
        try await store.setConsumptionConsent(ConsumptionConsent(consented: true, at: at), for: Self.alice)
        let responder = ConsumptionResponder(
            store: store, verifiers: [Self.app: harness.verifier], clients: [:], policies: [:], holder: "test", now: { at },
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        #expect(await responder.pass() == 1)
        #expect(try await store.consumptionRequest(uuid)?.state == .manual)
        #expect(try await store.erase(Self.alice) != nil)
        // Another person takes the ID and consents; the waiting request was the erased customer's.
        _ = try await store.appAccountToken(for: "alice", bundleId: Self.app.bundleId, environment: .sandbox, renew: false)
        try await store.setConsumptionConsent(ConsumptionConsent(consented: true, at: at), for: Self.alice)
        let answer = ConsumptionAnswer(deliveryStatus: .delivered, refundPreference: .decline)
        #expect(try await store.answerConsumptionRequest(uuid, answer: answer, decidedBy: "key support", at: at)?.state == .pending)
        #expect(await responder.pass() == 1)
        let sent = try #require(try await store.consumptionRequest(uuid))
        #expect(sent.state == .notConsented && sent.lastError?.contains("names no customer") == true, "\(sent)")
        #expect(sent.facts?.consented == false, "the facts still say the consent it was decided under: \(sent)")
    }
}

@Suite("Ledger copy: consumption requests and consents", .needsPostgres, .dropsTestDatabases)
struct ConsumptionCopyTests {
    @Test("a copy carries each request's state and each consent: the copied ledger has nothing to decide again")
    func copied() async throws {
        let (source, harness, _, uuid) = try await ConsumptionStoreTests.refundRequested(.sqlite)
        let alice = CustomerKey(bundleId: ConsumptionStoreTests.app.bundleId, environment: .sandbox, customerId: "alice")
        let at = harness.engine.state.now
        try await source.setConsumptionConsent(ConsumptionConsent(consented: true, at: Date(epochMilliseconds: at.epochMilliseconds)), for: alice)
        let responder = ConsumptionResponder(
            store: source, verifiers: [ConsumptionStoreTests.app: harness.verifier], clients: [:], policies: [:], holder: "test", now: { at },
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        #expect(await responder.pass() == 1)
        let decided = try #require(try await source.consumptionRequest(uuid))
        #expect(decided.state == .manual)

        let target = try await PostgresTestDatabase.openStore()
        _ = try await LedgerCopy.copy(from: try #require(source as? SQLiteLedgerStore), to: target, pageSize: 3)
        #expect(try await target.consumptionRequest(uuid) == decided)
        #expect(try await target.consumptionConsent(alice) == source.consumptionConsent(alice))
        #expect(try await target.claimConsumptionRequests(now: at, holder: "t", until: at.addingTimeInterval(60), limit: 10).isEmpty)
        await target.close()
    }
}

@Suite("Ledger stores: the support overview's figures", .dropsTestDatabases)
struct SupportOverviewStoreTests {
    @Test(
        "active subscribers by product, trials, conversions, lapsed trials, renewals, refunds and revenue, the same on both backends",
        arguments: Backend.available)
    func figures(backend: Backend) async throws {
        var harness = SimulatorFixture()
        for name in ["ann", "bob", "cal", "dan", "eve"] { try harness.engine.createCustomer(id: name) }
        let bobs = try harness.engine.purchase(.init(customerId: "bob", productId: "pro.monthly", offerId: "intro.trial"))
        _ = try harness.engine.purchase(.init(customerId: "ann", productId: "pro.monthly", offerId: "intro.trial"))
        _ = try harness.engine.purchase(.init(customerId: "eve", productId: "pro.monthly", offerId: "intro.trial"))
        try harness.engine.setAutoRenew(originalTransactionId: bobs.originalTransactionId, enabled: false)
        try harness.advance(days: 8)
        _ = try harness.engine.purchase(.init(customerId: "cal", productId: "basic.monthly"))
        let coins = try harness.engine.purchase(.init(customerId: "dan", productId: "coins.100"))
        try harness.engine.refund(transactionId: coins.transactionId)
        _ = try harness.engine.purchase(.init(customerId: "eve", productId: "coins.100"))
        let store = try await backend.makeStore()
        for notification in try await harness.verifiedNotifications() { _ = try await store.apply(notification) }
        let now = harness.engine.state.now
        let overview = try await store.overview(
            ConsumptionStoreTests.app, since: now.addingTimeInterval(-30 * 86_400), now: now.addingTimeInterval(1))
        // ann and eve converted after their week of trial (eve's renewal is a paid period too); bob's trial lapsed.
        #expect(overview.activeByProduct == ["pro.monthly": 2, "basic.monthly": 1], "\(overview)")
        #expect(overview.trials == 0 && overview.trialConversions == 2 && overview.renewals == 2 && overview.trialsLapsed == 1, "\(overview)")
        #expect(overview.newPurchases == 6 && overview.refunds == 1 && overview.churned == 0, "\(overview)")
        #expect(overview.trialConversionRate.map { abs($0 - 2.0 / 3.0) < 0.0001 } == true)
        // Two paid months of pro (9.99), one of basic, and eve's coins; dan's refunded coins are not revenue.
        let basic = Catalog.sample.products.first { $0.productId == "basic.monthly" }?.prices["USA"] ?? 0
        let coinPrice = Catalog.sample.products.first { $0.productId == "coins.100" }?.prices["USA"] ?? 0
        #expect(overview.revenue == ["USD": 2 * 9_990 + Int64(basic) + Int64(coinPrice)], "\(overview.revenue)")
        #expect(overview.purchasesPerDay.reduce(0, +) == 8 && overview.purchasesPerDay.count == 30)
    }

    @Test(
        "a renewal whose earlier periods the ledger never saw (an app submitting its latest renewal only) counts as a renewal, not after a trial",
        arguments: Backend.available)
    func renewalAlone(backend: Backend) async throws {
        var harness = SimulatorFixture()
        try harness.engine.createCustomer(id: "fay")
        _ = try harness.engine.purchase(.init(customerId: "fay", productId: "pro.monthly"))
        try harness.advance(days: 32)
        let store = try await backend.makeStore()
        let renewals = try await harness.verifiedNotifications().filter { $0.payload.notificationType == .didRenew }
        #expect(!renewals.isEmpty)
        for notification in renewals { _ = try await store.apply(notification) }
        let now = harness.engine.state.now
        // It crashed the SQLite server (a NULL read as a number), and failed on PostgreSQL.
        let overview = try await store.overview(
            ConsumptionStoreTests.app, since: now.addingTimeInterval(-30 * 86_400), now: now.addingTimeInterval(1))
        #expect(overview.renewals == renewals.count && overview.trialConversions == 0, "\(overview)")
    }
}
