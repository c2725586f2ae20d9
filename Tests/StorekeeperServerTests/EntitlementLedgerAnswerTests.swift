import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: answers from the entitlement ledger")
struct EntitlementLedgerAnswerTests {
    @Test(
        "every shipped scenario: each customer's answer from the reduced ledger is byte for byte the answer from the whole ledger",
        arguments: ShippedScenarios.all.map(\.name))
    func sameAnswers(name: String) async throws {
        var testbed = try ServerTestbed()
        let simulator = Simulator(engine: testbed.engine)
        try await ScenarioRunner(simulator: simulator).run(try #require(try ShippedScenarios.named(name)))
        testbed.engine = await simulator.engine
        let configuration = testbed.configuration
        let verifier = try #require(try configuration.makeVerifiers()[VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)])
        for record in testbed.engine.state.transactions.values.sorted(by: { $0.info.transactionId < $1.info.transactionId }) {
            let signed = try testbed.engine.signTransaction(record.info.transactionId)
            _ = try await testbed.store.submit(try await verifier.verifyTransaction(signed), customerId: record.customerId)
        }
        for notification in testbed.engine.state.notifications {
            _ = try await testbed.store.apply(try await verifier.verifyNotification(notification.signedPayload))
        }
        let now = testbed.engine.state.now
        var compared = 0
        for truth in testbed.engine.groundTruth() {
            var answers: [(body: String, validUntil: Date?)] = []
            for reduced in [false, true] {
                var ledger =
                    reduced
                    ? try await testbed.store.entitlementLedger(for: truth.customerId, bundleId: "com.example.storekeeper", environment: .sandbox)
                    : try await testbed.store.ledger(for: truth.customerId, bundleId: "com.example.storekeeper", environment: .sandbox)
                ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == "com.example.storekeeper" }
                let answer = CustomerAnswer(
                    for: truth.customerId, in: ledger, bundleId: "com.example.storekeeper", environment: .sandbox,
                    configuration: configuration.entitlements, at: now
                )
                answers.append((String(buffer: answer.json()), answer.validUntil))
                // The answer's own JSON writer writes what JSONEncoder writes for the same answer.
                #expect(String(buffer: answer.json()) == String(decoding: try AppStoreJSON.makeEncoder().encode(answer), as: UTF8.self))
            }
            #expect(answers[0].body == answers[1].body, "\(name) \(truth.customerId)")
            #expect(answers[0].validUntil == answers[1].validUntil, "\(name) \(truth.customerId)")
            compared += 1
        }
        #expect(compared > 0)
    }
}
