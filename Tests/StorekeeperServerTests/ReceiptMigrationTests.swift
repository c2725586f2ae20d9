import AppStoreModels
import AppStoreReceipts
import AppStoreSimulator
import Foundation
import Glibc
import Logging
import NIOHTTP1
import ServiceLifecycle
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

/// `POST /v1/customers/{id}/receipts`: customers of the StoreKit 1 era migrated from their app receipts.
@Suite("Storekeeper server: migration from app receipts")
struct ReceiptMigrationTests {
    typealias T = RecoveryTestbed

    static func post(
        _ receipt: String, for customer: String, to base: String, key: String = T.appKey
    ) async throws -> (status: Int, json: [String: Any]) {
        try await T.call(.POST, base + "/v1/customers/\(customer)/receipts", key: key, body: #"{"receipt":"\#(receipt)"}"#)
    }

    static func code(_ answer: (status: Int, json: [String: Any])) -> String? {
        (answer.json["error"] as? [String: Any])?["code"] as? String
    }

    @Test(
        "every customer of played scenarios, migrated from the receipt the simulator issues, has the ground truth's entitlements; again, nothing changes"
    )
    func scenariosFromReceipts() async throws {
        let testbed = try await T(environment: .sandbox)
        // The scenarios play with no server listening: the ledger learns nothing from notifications.
        for name in ["subscriber-lifecycle", "refunds", "family-sharing", "plan-changes"] {
            let scenario = try #require(try ShippedScenarios.named(name))
            _ = try await ScenarioRunner(simulator: testbed.simulator).run(scenario)
        }
        testbed.clock.set(await testbed.simulator.state.now)
        try await testbed.withSimulator { simulatorURL in
            let configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            try await testbed.withServer(configuration) { base in
                _ = try await testbed.simulator.perform { engine in engine.setNotificationURL(nil) }
                let truths = try await testbed.simulator.read { $0.groundTruth() }
                let before = try await testbed.mismatches(at: base)
                #expect(
                    before.count == truths.filter { !$0.entitlements.isEmpty || $0.consumableBalance.contains { $0.value != 0 } }.count,
                    "the ledger starts empty: \(before)")
                var migrated = 0
                for truth in truths {
                    let receipt = try await testbed.simulator.read { (engine) throws(SimulatorError) in
                        Data(try engine.appReceipt(customerId: truth.customerId, bundleId: nil)).base64EncodedString()
                    }
                    let answer = try await Self.post(receipt, for: truth.customerId, to: base)
                    if answer.status == 422 {
                        #expect(Self.code(answer) == "no-purchases" && truth.entitlements.isEmpty, "\(truth.customerId): \(answer.json)")
                        continue
                    }
                    #expect(answer.status == 200, "\(truth.customerId): \(answer.json)")
                    let report = try #require(answer.json["import"] as? [String: Any])
                    #expect((report["refused"] as? [Any])?.isEmpty == true, "\(report)")
                    #expect((answer.json["customer"] as? [String: Any])?["customerId"] as? String == truth.customerId)
                    migrated += 1
                    // The same receipt again: linked again, nothing changed.
                    let again = try await Self.post(receipt, for: truth.customerId, to: base)
                    #expect(again.status == 200)
                    #expect((again.json["import"] as? [String: Any])?["recordsChanged"] as? Int == 0, "\(again.json)")
                    #expect((again.json["import"] as? [String: Any])?["linked"] as? [String] == report["linked"] as? [String])
                }
                #expect(migrated >= 5)
                let after = try await testbed.mismatches(at: base)
                #expect(after == [], "\(after)")
            }
        }
    }

    @Test("a receipt changed, of another root, a JWS, garbage, another customer's, another app's: each refused with its reason, nothing stored")
    func refusals() async throws {
        let testbed = try await T(environment: .sandbox)
        let (receipt, bytes) = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "ada")
            let purchase = try engine.purchase(.init(customerId: "ada", productId: "unlock.lifetime"))
            let bytes = try engine.appReceipt(customerId: "ada", bundleId: nil)
            return (purchase, bytes)
        }
        try await testbed.withSimulator { simulatorURL in
            var configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            configuration.apps.append(
                .init(bundleId: "com.example.other", appAppleId: 1, environments: [.sandbox], trustedRoots: configuration.apps[0].trustedRoots))
            try await testbed.withServer(configuration) { base in
                _ = try await testbed.simulator.perform { engine in engine.setNotificationURL(nil) }
                var changed = bytes
                let product = Array("unlock.lifetime".utf8)
                let at = try #require(changed.indices.first { changed[$0...].starts(with: product) })
                changed[at] = UInt8(ascii: "v")
                // A real App Store receipt: another app's (the key's app is checked before the chain).
                let apple = try String(contentsOf: SharedCorpus.appleReceipts.appendingPathComponent("sandbox-2025-tpiar-g5.b64"), encoding: .utf8)
                let cases: [(String, Int, String, String)] = [
                    (Data(changed).base64EncodedString(), 400, "invalid-receipt", "signature-invalid"),
                    (apple.trimmingCharacters(in: .whitespacesAndNewlines), 403, "other-app", "the receipt is app"),
                    (receipt.signedTransaction, 400, "invalid-receipt", "jws-given"),
                    ("bm90IGEgcmVjZWlwdA==", 400, "invalid-receipt", "not-"),
                    ("", 400, "invalid-receipt", ""),
                ]
                for (text, status, code, reason) in cases {
                    let answer = try await Self.post(text, for: "ada", to: base)
                    #expect(answer.status == status && Self.code(answer) == code, "\(reason): \(answer.json)")
                    let message = ((answer.json["error"] as? [String: Any])?["message"] as? String) ?? ""
                    #expect(message.hasPrefix(reason), "\(message)")
                }
                let body = try await T.call(.POST, base + "/v1/customers/ada/receipts", key: T.appKey, body: #"{"receipt":"x","extra":1}"#)
                #expect(body.status == 400 && Self.code(body) == "malformed-body", "\(body.json)")
                #expect(try await T.call(.GET, base + "/v1/customers/ada", key: T.appKey).status == 404, "nothing was stored")

                let good = Data(bytes).base64EncodedString()
                #expect(try await Self.post(good, for: "ada", to: base).status == 200)
                // Another customer sending ada's receipt takes nothing (restore policy keep).
                let thief = try await Self.post(good, for: "mallory", to: base)
                #expect(thief.status == 409 && Self.code(thief) == "purchase-owned-by-another-customer", "\(thief.json)")
                #expect(try await T.call(.GET, base + "/v1/customers/mallory", key: T.appKey).status == 404)
                // Naming another app than the key's.
                let otherApp = try await T.call(
                    .POST, base + "/v1/customers/ada/receipts?bundleId=com.example.other", key: T.appKey, body: #"{"receipt":"\#(good)"}"#)
                #expect(otherApp.status == 403 && Self.code(otherApp) == "other-app", "\(otherApp.json)")
            }
        }
    }

    @Test("POST /v1/admin/imports runs an import on the server: followed to its end, every customer has the ground truth")
    func adminImport() async throws {
        let testbed = try await T(environment: .sandbox)
        for name in ["subscriber-lifecycle", "refunds"] {
            _ = try await ScenarioRunner(simulator: testbed.simulator).run(try #require(try ShippedScenarios.named(name)))
        }
        testbed.clock.set(await testbed.simulator.state.now)
        let csv = try await testbed.simulator.read { (engine) throws(SimulatorError) in
            var rows = ["customerId,transactionOrReceipt"]
            for (index, truth) in engine.groundTruth().enumerated() {
                guard let first = engine.transactions(customerId: truth.customerId, bundleId: TestAppStore.bundleID).first else { continue }
                rows.append(
                    index % 2 == 0
                        ? "\(truth.customerId),\(first.info.originalTransactionId)"
                        : "\(truth.customerId),\(Data(try engine.appReceipt(customerId: truth.customerId, bundleId: nil)).base64EncodedString())")
            }
            return rows.joined(separator: "\n") + "\nbad line\n"
        }
        try await testbed.withSimulator { simulatorURL in
            let configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            try await testbed.withServer(configuration) { base in
                _ = try await testbed.simulator.perform { engine in engine.setNotificationURL(nil) }
                #expect(try await T.call(.POST, base + "/v1/admin/imports", key: T.appKey, body: csv).status == 403)
                let started = try await T.call(.POST, base + "/v1/admin/imports", key: T.adminKey, body: csv)
                #expect(started.status == 202, "\(started.json)")
                let status = try #require(started.json["status"] as? String)
                // One import at a time on an instance: a second while the first runs is refused, naming the first.
                let second = try await T.call(.POST, base + "/v1/admin/imports", key: T.adminKey, body: csv)
                let firstId = try #require(started.json["id"] as? String)
                var imports = 1
                if second.status == 202 {
                    // Only if the first had finished already (a fast machine).
                    #expect(try await T.call(.GET, base + status, key: T.adminKey).json["state"] as? String != "running")
                    imports = 2
                } else {
                    let error = second.json["error"] as? [String: Any]
                    #expect(
                        second.status == 409 && error?["code"] as? String == "import-running"
                            && (error?["message"] as? String)?.contains(firstId) == true, "\(second.json)")
                }
                var answer: (status: Int, json: [String: Any]) = (0, [:])
                let deadline = ContinuousClock.now + .seconds(60)
                repeat {
                    try await Task.sleep(for: .milliseconds(100))
                    answer = try await T.call(.GET, base + status, key: T.adminKey)
                } while answer.json["state"] as? String == "running" && ContinuousClock.now < deadline
                #expect(answer.json["state"] as? String == "finished", "\(answer.json)")
                let progress = try #require(answer.json["progress"] as? [String: Any])
                let counts = progress["counts"] as? [String: Int] ?? [:]
                #expect(
                    counts["failed"] == 1 && (counts["imported"] ?? 0) >= 2 && progress["done"] as? Int == progress["total"] as? Int, "\(progress)")
                #expect(try await testbed.mismatches(at: base) == [])
                let list = try await T.call(.GET, base + "/v1/admin/imports", key: T.adminKey)
                #expect((list.json["imports"] as? [[String: Any]])?.count == imports)
                #expect(try await T.call(.GET, base + "/v1/admin/imports/imp_nope", key: T.adminKey).status == 404)
            }
        }
    }

    @Test("on PostgreSQL: every customer of played scenarios, imported by receipt or transaction ID, has the ground truth", .needsPostgres)
    func postgres() async throws {
        let testbed = try await T(environment: .sandbox)
        for name in ["subscriber-lifecycle", "refunds", "family-sharing"] {
            _ = try await ScenarioRunner(simulator: testbed.simulator).run(try #require(try ShippedScenarios.named(name)))
        }
        let now = await testbed.simulator.state.now
        let truths = try await testbed.simulator.read { $0.groundTruth() }
        let store = try await PostgresTestDatabase.openStore()
        try await testbed.withSimulator { simulatorURL in
            let configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            let importers = configuration.makeImporters(
                store: store, clients: try configuration.makeServerAPIClients(logger: logger), verifiers: try configuration.makeVerifiers(),
                logger: logger)
            let importer = try #require(importers[VerifierKey(bundleId: TestAppStore.bundleID, environment: .sandbox)])
            let receiptVerifiers = try configuration.makeReceiptVerifiers()
            for (index, truth) in truths.enumerated() {
                let transactions = try await testbed.simulator.read { $0.transactions(customerId: truth.customerId, bundleId: TestAppStore.bundleID) }
                guard let first = transactions.first else { continue }
                let transactionId: String
                if index % 2 == 0 {
                    transactionId = first.info.originalTransactionId
                } else {
                    let receipt = try await testbed.simulator.read { (engine) throws(SimulatorError) in
                        Data(try engine.appReceipt(customerId: truth.customerId, bundleId: nil)).base64EncodedString()
                    }
                    transactionId = try ReceiptMigrationAPI.account(
                        ofReceipt: receipt, verifiers: receiptVerifiers, apps: configuration.apps, keyApp: nil, asked: nil, now: now
                    ).transactionId
                }
                let report = try await importer.importCustomer(truth.customerId, transactionId: transactionId)
                #expect(report.refused.isEmpty && !report.linked.isEmpty, "\(truth.customerId): \(report)")
                let again = try await importer.importCustomer(truth.customerId, transactionId: transactionId)
                #expect(again.recordsChanged == 0 && again.newlyLinked == 0, "\(truth.customerId) again: \(again)")
            }
        }
        for truth in truths {
            let ledger = try await store.ledger(for: truth.customerId, bundleId: TestAppStore.bundleID, environment: .sandbox)
            let answer = CustomerAnswer(
                for: truth.customerId, in: ledger, bundleId: TestAppStore.bundleID, environment: .sandbox,
                configuration: SimulatorFixture.entitlements,
                at: now)
            #expect(Set(answer.entitlements.map(\.productId)) == Set(truth.entitlements.map(\.productId)), "\(truth.customerId)")
            #expect(answer.consumableBalance.filter { $0.value != 0 } == truth.consumableBalance.filter { $0.value != 0 }, "\(truth.customerId)")
        }
        await store.close()
    }

    @Test("with restorePolicy transfer, a receipt sent for another customer moves the purchases to them, as a submission would")
    func transfer() async throws {
        let testbed = try await T(environment: .sandbox)
        let bytes = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "ada")
            _ = try engine.purchase(.init(customerId: "ada", productId: "unlock.lifetime"))
            return try engine.appReceipt(customerId: "ada", bundleId: nil)
        }
        try await testbed.withSimulator { simulatorURL in
            var configuration = try testbed.configuration(baseURL: simulatorURL, recovery: .init(enabled: false))
            configuration.restorePolicy = .transfer
            try await testbed.withServer(configuration) { base in
                _ = try await testbed.simulator.perform { engine in engine.setNotificationURL(nil) }
                let receipt = Data(bytes).base64EncodedString()
                #expect(try await Self.post(receipt, for: "old-account", to: base).status == 200)
                let moved = try await Self.post(receipt, for: "new-account", to: base)
                #expect(moved.status == 200, "\(moved.json)")
                #expect((moved.json["import"] as? [String: Any])?["newlyLinked"] as? Int == 1)
                let new = try await T.call(.GET, base + "/v1/customers/new-account", key: T.appKey)
                let old = try await T.call(.GET, base + "/v1/customers/old-account", key: T.appKey)
                func products(_ answer: (status: Int, json: [String: Any])) -> [String] {
                    ((answer.json["entitlements"] as? [[String: Any]]) ?? []).compactMap { $0["productId"] as? String }
                }
                #expect(products(new) == ["unlock.lifetime"] && products(old).isEmpty, "\(new.json) \(old.json)")
            }
        }
    }

    @Test("an App Store that never answers is a 502 within the migration's bound, never a connection dropped unanswered")
    func appStoreHangs() async throws {
        let testbed = try await T(environment: .sandbox)
        let bytes = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "ada")
            _ = try engine.purchase(.init(customerId: "ada", productId: "unlock.lifetime"))
            return try engine.appReceipt(customerId: "ada", bundleId: nil)
        }
        let (socket, port) = try RelayTests.silentListener()
        defer { close(socket) }
        let configuration = try testbed.configuration(baseURL: "http://127.0.0.1:\(port)", recovery: .init(enabled: false))
        try await testbed.withServer(configuration) { base in
            let started = ContinuousClock.now
            let answer = try await Self.post(Data(bytes).base64EncodedString(), for: "ada", to: base)
            #expect(answer.status == 502 && Self.code(answer) == "app-store-unavailable", "\(answer.json)")
            #expect(ContinuousClock.now - started < .seconds(55), "answered before the HTTP response timeout")
        }
    }

    @Test("an import waiting on an App Store that never answers is stopped by DELETE, naming the key; stopped already, 409; another can start")
    func stopImport() async throws {
        let testbed = try await T(environment: .sandbox)
        let (socket, port) = try RelayTests.silentListener()
        defer { close(socket) }
        let configuration = try testbed.configuration(baseURL: "http://127.0.0.1:\(port)", recovery: .init(enabled: false))
        let csv = "ada,2000000000000001\nbob,2000000000000002\n"
        try await testbed.withServer(configuration) { base in
            let started = try await T.call(.POST, base + "/v1/admin/imports", key: T.adminKey, body: csv)
            let path = base + (try #require(started.json["status"] as? String))
            let running = try await T.call(.GET, path, key: T.adminKey)
            #expect(started.status == 202 && running.json["state"] as? String == "running", "\(running.json)")
            #expect(try await T.call(.DELETE, path, key: T.supportKey).status == 403)
            let began = ContinuousClock.now
            let stopped = try await T.call(.DELETE, path, key: T.adminKey)
            let progress = stopped.json["progress"] as? [String: Any] ?? [:]
            #expect(stopped.status == 200 && stopped.json["state"] as? String == "stopped", "\(stopped.json)")
            #expect(progress["stopped"] as? String == "stopped by admin key admin" && progress["done"] as? Int == 0, "\(progress)")
            #expect(ContinuousClock.now - began < .seconds(20), "stopped at once, not after the App Store's timeout")
            let again = try await T.call(.DELETE, path, key: T.adminKey)
            #expect(again.status == 409 && Self.code(again) == "import-not-running", "\(again.json)")
            #expect(try await T.call(.DELETE, base + "/v1/admin/imports/imp_nope", key: T.adminKey).status == 404)
            // An ID is percent-decoded before it is repeated, as the other routes' are.
            let encoded = try await T.call(.DELETE, base + "/v1/admin/imports/imp_..%2F..%2Fx", key: T.adminKey)
            let said = (encoded.json["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(encoded.status == 404 && said.contains("'imp_../../x'"), "\(encoded.json)")
            #expect(try await T.call(.PUT, path, key: T.adminKey).status == 405)
            #expect(try await T.call(.POST, base + "/v1/admin/imports", key: T.adminKey, body: csv).status == 202)
        }
    }

    @Test("a server stopped gracefully stops its running import first, and logs how far it went and how to finish it")
    func importAtShutdown() async throws {
        let testbed = try await T(environment: .sandbox)
        let (socket, port) = try RelayTests.silentListener()
        defer { close(socket) }
        let configuration = try testbed.configuration(baseURL: "http://127.0.0.1:\(port)", recovery: .init(enabled: false))
        let log = CapturedLog()
        let ports = AsyncStream<Int>.makeStream()
        let app = StorekeeperApplication.buildApplication(
            store: try SQLiteLedgerStore(path: testbed.database), configuration: configuration, verifiers: try configuration.makeVerifiers(),
            port: 0, logger: log.logger(), apiClients: try configuration.makeServerAPIClients(logger: log.logger()), ownsStore: true,
            onServerRunning: { ports.continuation.yield($0) })
        let group = ServiceGroup(configuration: .init(services: [app], logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = ports.stream.makeAsyncIterator()
            let base = "http://127.0.0.1:\(try #require(await iterator.next()))"
            let started = try await T.call(.POST, base + "/v1/admin/imports", key: T.adminKey, body: "ada,2000000000000001\n")
            #expect(started.status == 202)
            let began = ContinuousClock.now
            await group.triggerGracefulShutdown()
            try await tasks.next()
            #expect(ContinuousClock.now - began < .seconds(20), "the shutdown waited for the App Store's timeout")
        }
        let line = log.all.map(\.line).first { $0.contains("import stopped") } ?? ""
        #expect(
            line.contains("import.stopped=the server was stopped: post the list again to finish") && line.contains("import.done=0")
                && line.contains("import.lines=1") && line.contains("api_key=admin"), "\(log.all.map(\.line))")
    }
}
