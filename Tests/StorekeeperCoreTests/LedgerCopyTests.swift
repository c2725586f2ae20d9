import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// `storekeeper copy`: a SQLite ledger moved into PostgreSQL answers the same for every customer.
@Suite("Ledger copy: SQLite to PostgreSQL", .needsPostgres, .dropsTestDatabases)
struct LedgerCopyTests {
    typealias H = SimulatorFixture

    @Test("a ledger built by a shipped scenario, copied, gives every customer byte-identical answers", arguments: ShippedScenarios.all.map(\.name))
    func copyAnswersTheSame(name: String) async throws {
        var harness = H()
        try await harness.play(name)
        let source = try SQLiteLedgerStore(path: TestFiles.directory.appendingPathComponent("ledger-\(UUID()).sqlite").path)
        try await harness.submitAll(to: source)
        // A customer with two purchases under their server-issued token, then erased: the token stays retired.
        let leaverToken = try await source.appAccountToken(for: "leaver", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        try harness.customer("apple-leaver")
        let kept = try harness.engine.purchase(.init(customerId: "apple-leaver", productId: "unlock.lifetime", appAccountToken: leaverToken))
        _ = try harness.engine.purchase(.init(customerId: "apple-leaver", productId: "season.pass", appAccountToken: leaverToken))
        let notifications = try await harness.verifiedNotifications()
        for notification in notifications { _ = try await source.apply(notification) }
        _ = try #require(try await source.erase(CustomerKey(bundleId: "com.example.storekeeper", environment: .sandbox, customerId: "leaver")))
        try await source.recordRefused(
            RefusedNotification(input: Array("junk".utf8), receivedAt: Date(), code: "malformed-jws", message: "not a JWS", status: 400, claims: nil),
            keeping: 10
        )
        let app = VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)
        _ = try await source.applyRecovered([], watermark: RecoveryWatermark(app: app, date: Date(epochMilliseconds: 1_790_000_000_000)))

        let issued = try await source.appAccountToken(for: "token-holder", bundleId: app.bundleId, environment: .sandbox, renew: false)
        let secret = try await source.ledgerSecret("events.cursor", orNew: Array(repeating: 7, count: 32))

        let target = try await PostgresTestDatabase.openStore()
        let report = try await LedgerCopy.copy(from: source, to: target, pageSize: 7)
        // The token the server issued is still the customer's, and still the one it gives out.
        #expect(try await target.appAccountToken(for: "token-holder", bundleId: app.bundleId, environment: .sandbox, renew: false) == issued)
        // The ledger's secrets too (the polling cursors consumers hold stay valid).
        #expect(try await target.ledgerSecret("events.cursor", orNew: Array(repeating: 9, count: 32)) == secret)
        #expect(report.customersDiffering.isEmpty, "\(report.customersDiffering)")
        let customers = try await source.customers()
        #expect(report.customersCompared == customers.count && !customers.isEmpty)

        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for customer in customers {
            var answers: [Data] = []
            for store in [source, target] as [any LedgerStore] {
                var ledger = try await store.entitlementLedger(
                    for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
                ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == customer.bundleId }
                let answer = CustomerAnswer(
                    for: customer.customerId, in: ledger, bundleId: customer.bundleId, environment: customer.environment,
                    configuration: H.entitlements, at: harness.engine.state.now
                )
                answers.append(try encoder.encode(answer))
            }
            #expect(
                answers[0] == answers[1],
                "\(customer.customerId): \(String(decoding: answers[0], as: UTF8.self)) vs \(String(decoding: answers[1], as: UTF8.self))")
        }
        #expect(try await target.notificationCounts() == source.notificationCounts())
        // The outbox moves too: the same events at the same positions, the same customers' sequences, and a position
        // counter past them (the next event neither repeats a position nor restarts a sequence).
        let route = WebhookRoute(name: "backend")
        _ = try await source.fanOut(route, limit: 0, now: Date())
        // Deliveries with their attempts' history: one delivered after a failure, one waiting to be retried.
        let now = Date(epochMilliseconds: 1_790_000_000_000)
        #expect(try await source.redeliver(route, filter: EventFilter(), now: now) > 1)
        let failed = DeliveryAttempt(attemptedAt: now, statusCode: 500, latencyMilliseconds: 12, error: "HTTP 500", responseExcerpt: "oops")
        let succeeded = DeliveryAttempt(attemptedAt: now, statusCode: 204, latencyMilliseconds: 3, error: nil, responseExcerpt: nil)
        let refused = DeliveryAttempt(attemptedAt: now, statusCode: nil, latencyMilliseconds: 10_000, error: "timed out", responseExcerpt: nil)
        // Each round a few seconds later: the earlier rounds' other claims (one second each) have lapsed.
        var round = 0.0
        func attempt(_ attempt: DeliveryAttempt, _ outcome: DeliveryOutcome, skipping done: [Int64]) async throws -> Int64 {
            round += 1
            let claimed = try await source.claimDeliveries(
                endpoint: route.name, holder: "copy-test", limit: 100, now: now.addingTimeInterval(round * 5), lease: .seconds(1))
            let delivery = try #require(claimed.first { !done.contains($0.event.position) })
            try await source.finishAttempts(
                endpoint: route.name, holder: "copy-test", [FinishedAttempt(position: delivery.event.position, attempt: attempt, outcome: outcome)])
            return delivery.event.position
        }
        let first = try await attempt(failed, .retry(at: now), skipping: [])
        #expect(try await attempt(succeeded, .delivered, skipping: []) == first)
        let second = try await attempt(refused, .retry(at: now.addingTimeInterval(60)), skipping: [first])
        let claimed = [first, second]
        // The support audit log, in order, with what each action asked and what came of it.
        let customer = CustomerKey(bundleId: "com.example.storekeeper", environment: .sandbox, customerId: "alice")
        for (index, outcome) in ["done", "refused", "failed"].enumerated() {
            _ = try await source.recordSupportAction(
                SupportAction(
                    at: now.addingTimeInterval(Double(index)), keyName: "desk", customer: customer, action: "extend-renewal-date",
                    target: index == 2 ? nil : "2000000000000001", request: ["days": .integer(7), "note": .string("outage \(index) \"é\"")],
                    outcome: outcome, detail: ["reason": .string("r\(index)")]))
        }
        let copiedAgain = try await PostgresTestDatabase.openStore()
        _ = try await LedgerCopy.copy(from: source, to: copiedAgain, pageSize: 7)
        let sourceEvents = try await source.events(after: 0, limit: 10_000, filter: EventFilter())
        #expect(!sourceEvents.isEmpty)
        #expect(try await target.events(after: 0, limit: 10_000, filter: EventFilter()) == sourceEvents)
        #expect(try await copiedAgain.lastEventPosition() == source.lastEventPosition())
        #expect(try await copiedAgain.endpointStatus("backend") == source.endpointStatus("backend"))
        for position in claimed {
            let history = try await source.deliveries(of: position)
            #expect(history.first?.history.isEmpty == false)
            #expect(try await copiedAgain.deliveries(of: position) == history, "delivery of \(position)")
        }
        let actions = try await source.supportActions(customer: customer)
        #expect(actions.map(\.outcome) == ["done", "refused", "failed"])
        #expect(try await copiedAgain.supportActions(customer: customer) == actions)
        #expect(try await copiedAgain.supportActions(target: "2000000000000001", environment: .sandbox).count == 2)
        // The same IDs (errors and logs name records by them), and the next record after them.
        #expect(try await copiedAgain.recordSupportAction(actions[0]) == (actions.last?.id ?? 0) + 1)
        await copiedAgain.close()
        #expect(try await target.recoveryWatermark(app) == source.recoveryWatermark(app))
        for notification in notifications {
            let uuid = notification.payload.notificationUUID
            #expect(try await target.rawPayload(notificationUUID: uuid) == source.rawPayload(notificationUUID: uuid))
        }
        // A copy goes into an empty database only.
        await #expect(throws: StorageError.self) { try await LedgerCopy.copy(from: source, to: target) }
        // (After the comparisons: this adds an event.) The erased customer's token is still retired: a restore of one of their purchases takes that purchase only.
        let restore = try await harness.verifier.verifyTransaction(try harness.engine.signTransaction(kept.transactionId))
        #expect(try await target.submit(restore, customerId: "leaver-2") == .linked)
        let restored = try await target.entitlementLedger(for: "leaver-2", bundleId: app.bundleId, environment: .sandbox)
        #expect(
            Set(restored.transactions.values.map(\.info.productId)) == ["unlock.lifetime"], "\(restored.transactions.values.map(\.info.productId))")
        await target.close()
        // One a server only started on (its webhook endpoint's place in the outbox, nothing else) is not empty either:
        // refused before anything is copied (it used to fail half-way, on that endpoint's row).
        let started = try await PostgresTestDatabase.openStore()
        _ = try await started.fanOut(route, limit: 0, now: Date())
        let notEmpty = await #expect(throws: StorageError.self) { try await LedgerCopy.copy(from: source, to: started) }
        #expect(notEmpty?.message.contains("not empty") == true, "\(notEmpty.map { "\($0)" } ?? "")")
        #expect(try await started.lastEventPosition() == 0)
        let fresh = Array(repeating: UInt8(3), count: 32)
        #expect(try await started.ledgerSecret("events.cursor", orNew: fresh) == fresh, "the source's key was not copied either")
        await started.close()
    }
}
