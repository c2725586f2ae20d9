import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import GRDB
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperSQLite

/// Signed data is stored once per distinct header and given back byte for byte; the ledger stays small per
/// notification; old ledgers migrate; raw payloads can be dropped after a while while the facts stay.
@Suite("SQLite ledger: signed data storage")
struct SignedDataStorageTests {
    typealias H = SimulatorFixture

    static func temporaryPath() -> String {
        TestFiles.directory.appendingPathComponent("signed-\(UUID()).sqlite").path
    }

    static var corpus: URL { SharedCorpus.appleSigned }

    @Test("every real Apple JWS of the corpus splits and comes back byte for byte, nested headers taken out")
    func corpusRoundTrip() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).filter {
            $0.hasSuffix(".jws") && !$0.hasPrefix("negative-truncated")
        }
        #expect(files.count > 25)
        for file in files {
            let jws = try String(contentsOf: Self.corpus.appendingPathComponent(file), encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines)
            var headers: [String] = []
            let stored = try #require(
                try StoredJWS(splitting: jws) { text in
                    if let index = headers.firstIndex(of: text) { return Int64(index) }
                    headers.append(text)
                    return Int64(headers.count - 1)
                }, "\(file)")
            #expect(stored.jws { headers.indices.contains(Int($0)) ? headers[Int($0)] : nil } == jws, "\(file)")
            if file.hasPrefix("notification-") && !file.contains("TEST") {
                // The nested transaction (and renewal info) headers are out of the stored payload.
                #expect(stored.payload.count * 4 / 3 < jws.utf8.count / 2, "\(file): \(stored.payload.count) of \(jws.utf8.count)")
            }
        }
    }

    @Test("what would not come back exactly is refused: a payload holding the marker byte, non-canonical base64url, not three parts")
    func refusals() throws {
        let marker = "eyJhIjoiASJ9"  // base64url of {"a":"\u{1}"} (not even JSON: a raw control character)
        for jws in ["eyJhbGciOiJFUzI1NiJ9.\(marker).c2ln", "eyJhbGciOiJFUzI1NiJ9.eyJhIjoxfR.c2ln", "a.b", "eyJ.e30.c2ln.x", ".e30.c2ln"] {
            #expect(try StoredJWS(splitting: jws) { _ in 1 } == nil, "\(jws)")
        }
        #expect(
            try StoredJWS(splitting: "eyJhbGciOiJFUzI1NiJ9.e30.c2ln") { _ in 7 }?.jws { $0 == 7 ? "eyJhbGciOiJFUzI1NiJ9" : nil }
                == "eyJhbGciOiJFUzI1NiJ9.e30.c2ln")
    }

    @Test("every notification's raw payload and every transaction's and renewal info's JWS come back byte for byte from the store")
    func storeRoundTrip() async throws {
        for name in ["subscriber-lifecycle", "family-sharing", "refunds"] {
            var harness = H()
            try await harness.play(name)
            let store = try SQLiteLedgerStore(path: Self.temporaryPath())
            // The reference model gets what the store gets: the apps' submissions, then the notifications.
            var reference = Ledger()
            for (transaction, customer) in try await harness.appSubmissions() {
                #expect(try await store.submit(transaction, customerId: customer) == .linked)
                reference.apply(transaction.payload, jws: transaction.jws, source: "app")
                try reference.link(transaction.payload, to: customer)
            }
            for notification in try await harness.verifiedNotifications() {
                _ = try await store.apply(notification)
                reference.apply(notification)
                #expect(try await store.rawPayload(notificationUUID: notification.payload.notificationUUID) == notification.notification.jws)
            }
            for customer in harness.engine.groundTruth().map(\.customerId) {
                let ledger = try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                #expect(!ledger.transactions.isEmpty)
                for (key, transaction) in ledger.transactions {
                    #expect(transaction.jws == reference.transactions[key]?.jws, "\(name) \(key)")
                    #expect(transaction.info == reference.transactions[key]?.info, "\(name) \(key)")
                }
                for (key, subscription) in ledger.subscriptions {
                    #expect(subscription.renewalJWS == reference.subscriptions[key]?.renewalJWS, "\(name) \(key)")
                    #expect(subscription.renewalInfo == reference.subscriptions[key]?.renewalInfo, "\(name) \(key)")
                }
            }
            let headers = try await store.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM jws_headers") }
            #expect(headers == 1, "one signing chain, one stored header")
        }
    }

    @Test("a ledger holds under 6 KB per notification of the ingest benchmark's kind (purchases of coins and of a monthly plan)")
    func bytesPerNotification() async throws {
        var harness = H()
        var index = 0
        while harness.engine.state.notifications.count < 400 {
            try harness.engine.createCustomer(id: "customer-\(index)")
            _ = try harness.engine.purchase(.init(customerId: "customer-\(index)", productId: index % 2 == 0 ? "coins.100" : "pro.monthly"))
            index += 1
        }
        let path = Self.temporaryPath()
        let store = try SQLiteLedgerStore(path: path)
        let empty = try await store.usedBytes()
        let notifications = try await harness.verifiedNotifications()
        for notification in notifications { _ = try await store.apply(notification) }
        let perNotification = (try await store.usedBytes() - empty) / notifications.count
        #expect(perNotification < 6_000, "\(perNotification) bytes per notification")
    }

    @Test("raw payloads past retention are dropped; the decoded facts and every answer stay")
    func pruning() async throws {
        var harness = H()
        try await harness.play("subscriber-lifecycle")
        let store = try SQLiteLedgerStore(path: Self.temporaryPath())
        try await harness.submitAll(to: store)
        let notifications = try await harness.verifiedNotifications()
        for notification in notifications { _ = try await store.apply(notification) }
        let before = try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox)
        let counts = try await store.notificationCounts()
        #expect(try await store.pruneRawPayloads(receivedBefore: Date().addingTimeInterval(-3_600)) == 0)
        #expect(try await store.pruneRawPayloads(receivedBefore: Date().addingTimeInterval(1)) == notifications.count)
        for notification in notifications {
            #expect(try await store.rawPayload(notificationUUID: notification.payload.notificationUUID) == nil)
        }
        #expect(try await store.ledger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox) == before)
        #expect(try await store.notificationCounts() == counts)
        // A duplicate is still recognised after its payload went.
        #expect(try await store.apply(notifications[0]) == .duplicate)
    }
}
