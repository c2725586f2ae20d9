import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import GRDB
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperSQLite

@Suite("SQLite ledger: migrations")
struct SQLiteMigrationTests {
    @Test("a database of the first schema is migrated at open: the columns later migrations add are filled from the stored JSON")
    func fromFirstSchema() async throws {
        var harness = SimulatorFixture()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let transaction = try await harness.verifier.verifyTransaction(purchase.signedTransaction)
        let path = TestFiles.directory.appendingPathComponent("ledger-v1-\(UUID()).sqlite").path
        do {
            // The first schema, with a row written the way the first release wrote it.
            let queue = try DatabaseQueue(path: path)
            try SQLiteLedgerStore.migrator.migrate(queue, upTo: "v1: ledger")
            let info = String(decoding: try AppStoreJSON.makeEncoder().encode(transaction.payload), as: UTF8.self)
            try await queue.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id,
                            app_account_token, signed_date, jws, source, info) VALUES ('Sandbox', ?, ?, 'pro.monthly', NULL, ?, ?, 'app', ?)
                        """,
                    arguments: [
                        purchase.transactionId, purchase.originalTransactionId, transaction.payload.signedDate?.epochMilliseconds, transaction.jws,
                        info,
                    ]
                )
                try db.execute(
                    sql: "INSERT INTO customer_links (environment, original_transaction_id, customer_id) VALUES ('Sandbox', ?, 'alice')",
                    arguments: [purchase.originalTransactionId]
                )
            }
            try queue.close()
        }
        let store = try SQLiteLedgerStore(path: path)
        let columns = try store.pool.read { db in
            try Row.fetchOne(db, sql: "SELECT purchase_date, product_type, bundle_id, quantity, revoked FROM transactions")
        }
        #expect(columns?["purchase_date"] == transaction.payload.purchaseDate.epochMilliseconds)
        #expect(columns?["product_type"] == "Auto-Renewable Subscription")
        #expect(columns?["bundle_id"] == "com.example.storekeeper")
        #expect(columns?["quantity"] == 1)
        #expect(columns?["revoked"] == false)
        let reduced = try await store.entitlementLedger(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox)
        #expect(reduced.transactions.values.map(\.info.transactionId) == [purchase.transactionId])
        let state = EntitlementEngine(configuration: SimulatorFixture.entitlements)
            .state(of: "alice", in: reduced, environment: .sandbox, at: harness.engine.state.now)
        #expect(state.entitledProductIds == ["pro.monthly"])
        // The open says which migrations it applied; the next open applies none.
        #expect(store.migrationsApplied == Array(SQLiteLedgerStore.migrator.migrations.dropFirst()))
        #expect(try SQLiteLedgerStore(path: path).migrationsApplied.isEmpty)
    }

    @Test(
        "a ledger of schema v4 (raw JWS, global token owners, whole refused payloads) migrates: every JWS comes back byte for byte, tokens are per app, refusals are bounded records, the file shrinks"
    )
    func fromRawSignedData() async throws {
        var harness = SimulatorFixture()
        let token = LowercaseUUID(UUID())
        try harness.engine.createCustomer(id: "tina")
        _ = try harness.engine.purchase(.init(customerId: "tina", productId: "pro.monthly", appAccountToken: token))
        try await harness.play("subscriber-lifecycle")
        var reference = Ledger()
        try harness.linkCustomers(in: &reference)
        let notifications = try await harness.verifiedNotifications()
        for notification in notifications { reference.apply(notification) }
        let path = TestFiles.directory.appendingPathComponent("ledger-v4-\(UUID()).sqlite").path
        do {
            // The v4 schema, with rows written the way v4 wrote them.
            let queue = try DatabaseQueue(path: path)
            try SQLiteLedgerStore.migrator.migrate(queue, upTo: "v4: transactions' app, quantity and refund as columns")
            let encoder = AppStoreJSON.makeEncoder()
            let reference = reference
            try await queue.write { db in
                for notification in reference.notifications.values {
                    try db.execute(
                        sql:
                            "INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, signed_payload, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                        arguments: [
                            notification.notificationUUID, notification.notificationType.rawValue, notification.subtype?.rawValue,
                            notification.signedDate?.epochMilliseconds, notification.environment?.rawValue, notification.outcome,
                            notification.signedPayload,
                        ]
                    )
                }
                for (key, transaction) in reference.transactions {
                    let info = transaction.info
                    try db.execute(
                        sql: """
                            INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id, app_account_token,
                                signed_date, jws, source, info, purchase_date, product_type, bundle_id, quantity, revoked)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            key.environment.rawValue, key.id, info.originalTransactionId, info.productId, info.appAccountToken?.description,
                            transaction.signedDate.epochMilliseconds, transaction.jws, transaction.source,
                            String(decoding: try encoder.encode(info), as: UTF8.self), info.purchaseDate.epochMilliseconds,
                            info.type.rawValue, info.bundleId, info.quantity ?? 1, info.revocationDate != nil,
                        ]
                    )
                }
                for (key, subscription) in reference.subscriptions {
                    try db.execute(
                        sql: """
                            INSERT INTO subscriptions (environment, original_transaction_id, bundle_id, status, status_signed_date,
                                status_notification_uuid, renewal_info, renewal_signed_date, renewal_jws) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            key.environment.rawValue, key.id, subscription.bundleId, subscription.status?.rawValue,
                            subscription.statusSignedDate?.epochMilliseconds, subscription.statusNotificationUUID,
                            try subscription.renewalInfo.map { String(decoding: try encoder.encode($0), as: UTF8.self) },
                            subscription.renewalSignedDate?.epochMilliseconds, subscription.renewalJWS,
                        ]
                    )
                }
                for (key, customer) in reference.explicitLinks {
                    try db.execute(
                        sql: "INSERT INTO customer_links (environment, original_transaction_id, customer_id) VALUES (?, ?, ?)",
                        arguments: [key.environment.rawValue, key.id, customer])
                }
                // v4 kept one owner per token, whatever the app.
                try db.execute(sql: "INSERT INTO tokens (token, customer_id) VALUES (?, 'tina')", arguments: [token.description])
                for _ in 0..<3 {
                    try db.execute(
                        sql: "INSERT INTO rejected_notifications (received_at, reason, signed_payload) VALUES (1, 'malformed-jws: not a JWS', ?)",
                        arguments: [String(repeating: "junk\n", count: 100_000)])
                }
            }
            try queue.close()
        }
        let bytesBefore = try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
        let store = try SQLiteLedgerStore(path: path)
        #expect(store.migrationsApplied == Array(SQLiteLedgerStore.migrator.migrations.drop { !$0.hasPrefix("v5") }))
        for notification in notifications {
            #expect(try await store.rawPayload(notificationUUID: notification.payload.notificationUUID) == notification.notification.jws)
        }
        for customer in ["alice", "tina"] {
            let ledger = try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
            #expect(!ledger.transactions.isEmpty, "\(customer)")
            for (key, transaction) in ledger.transactions {
                #expect(transaction == reference.transactions[key], "\(customer) \(key)")
            }
            for (key, subscription) in ledger.subscriptions { #expect(subscription == reference.subscriptions[key], "\(customer) \(key)") }
        }
        let owners = try store.pool.read { db in try Row.fetchAll(db, sql: "SELECT bundle_id, environment, token, customer_id FROM token_owners") }
        #expect(
            owners.map { [$0["bundle_id"], $0["environment"], $0["token"], $0["customer_id"]] as [String] } == [
                ["com.example.storekeeper", "Sandbox", token.description, "tina"]
            ])
        #expect(try await store.customerExists("tina", bundleId: "com.example.storekeeper", environment: .sandbox))
        let refused = try await store.refusedNotifications()
        #expect(refused.count == 3 && refused.allSatisfy { $0.code == "malformed-jws" && $0.size == 500_000 && $0.prefix.utf8.count < 600 })
        let bytesAfter = try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
        #expect(bytesAfter * 3 < bytesBefore, "\(bytesBefore) → \(bytesAfter) bytes")
    }

    @Test("a database migrated by a newer version is refused, named, and left unchanged")
    func newerDatabase() async throws {
        let path = TestFiles.directory.appendingPathComponent("ledger-newer-\(UUID()).sqlite").path
        do {
            let store = try SQLiteLedgerStore(path: path)
            try await store.pool.write { db in try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v9: from the future')") }
            await store.close()
        }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let error = #expect(throws: StorageError.self) { try SQLiteLedgerStore(path: path) }
        // Not a byte of the file changed (refused from a read-only look, before anything opened it for writing).
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes)
        // A backup refuses it the same way, and leaves it as it was.
        let destination = TestFiles.path("backup-\(UUID()).sqlite").path
        let backup = #expect(throws: StorageError.self) { try SQLiteLedgerStore.backup(database: path, to: destination) }
        #expect(backup?.message == error?.message, "\(String(describing: backup))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes)
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(
            error?.message
                == "cannot open the SQLite database at \(path): it was migrated by a newer Storekeeper (migrations this version does not know: v9: from the future); run that version, or restore a backup made with this one"
        )
        let applied = try await DatabaseQueue(path: path).read { db in
            try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid")
        }
        #expect(applied == SQLiteLedgerStore.migrator.migrations + ["v9: from the future"])
    }

    @Test("a ledger opened to read only is not migrated: one that needs it is refused, named, and left unchanged")
    func readingOnlyDoesNotMigrate() async throws {
        let path = TestFiles.directory.appendingPathComponent("ledger-read-v4-\(UUID()).sqlite").path
        do {
            let queue = try DatabaseQueue(path: path)
            try SQLiteLedgerStore.migrator.migrate(queue, upTo: "v4: transactions' app, quantity and refund as columns")
            try queue.close()
        }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let error = #expect(throws: StorageError.self) { try SQLiteLedgerStore(readingOnly: path) }
        #expect(error?.message.contains("\(path) was written by an older Storekeeper and needs migrating") == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes)
        // Opened to write, it migrates; then reading only opens it, and reads it without changing a byte.
        let store = try SQLiteLedgerStore(path: path)
        await store.close()
        let migrated = try Data(contentsOf: URL(fileURLWithPath: path))
        let reader = try SQLiteLedgerStore(readingOnly: path)
        #expect(reader.migrationsApplied.isEmpty)
        #expect(try await reader.lastEventPosition() == 0)
        await reader.close(checkpointing: false)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == migrated)
    }

    @Test("a new database gets every migration at its first open")
    func newDatabase() throws {
        let path = TestFiles.directory.appendingPathComponent("ledger-new-\(UUID()).sqlite").path
        #expect(try SQLiteLedgerStore(path: path).migrationsApplied == SQLiteLedgerStore.migrator.migrations)
        #expect(try SQLiteLedgerStore(path: path).migrationsApplied == [])
    }
}
