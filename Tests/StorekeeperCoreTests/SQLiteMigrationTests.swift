import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import GRDB
import StorekeeperCore
@testable import StorekeeperSQLite
import Testing

@Suite("SQLite ledger: migrations")
struct SQLiteMigrationTests {
    @Test("a database of the first schema is migrated at open: the columns later migrations add are filled from the stored JSON")
    func fromFirstSchema() async throws {
        var harness = try LedgerHarness()
        try harness.engine.createCustomer(id: "alice")
        let purchase = try harness.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let transaction = try await harness.verifier.verifyTransaction(purchase.signedTransaction)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-v1-\(UUID()).sqlite").path
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
                    arguments: [purchase.transactionId, purchase.originalTransactionId, transaction.payload.signedDate?.epochMilliseconds, transaction.jws, info]
                )
                try db.execute(
                    sql: "INSERT INTO customer_links (environment, original_transaction_id, customer_id) VALUES ('Sandbox', ?, 'alice')",
                    arguments: [purchase.originalTransactionId]
                )
            }
            try queue.close()
        }
        let store = try SQLiteLedgerStore(path: path)
        let columns = try await store.pool.read { db in
            try Row.fetchOne(db, sql: "SELECT purchase_date, product_type, bundle_id, quantity, revoked FROM transactions")
        }
        #expect(columns?["purchase_date"] == transaction.payload.purchaseDate.epochMilliseconds)
        #expect(columns?["product_type"] == "Auto-Renewable Subscription")
        #expect(columns?["bundle_id"] == "com.example.storekeeper")
        #expect(columns?["quantity"] == 1)
        #expect(columns?["revoked"] == false)
        let reduced = try await store.entitlementLedger(for: "alice", environment: .sandbox)
        #expect(reduced.transactions.values.map(\.info.transactionId) == [purchase.transactionId])
        let state = EntitlementEngine(configuration: LedgerHarness.configuration)
            .state(of: "alice", in: reduced, environment: .sandbox, at: harness.engine.state.now)
        #expect(state.entitledProductIds == ["pro.monthly"])
        // The open says which migrations it applied; the next open applies none.
        #expect(store.migrationsApplied == Array(SQLiteLedgerStore.migrator.migrations.dropFirst()))
        #expect(try SQLiteLedgerStore(path: path).migrationsApplied.isEmpty)
    }

    @Test("a database migrated by a newer version is refused, named, and left unchanged")
    func newerDatabase() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-newer-\(UUID()).sqlite").path
        do {
            let store = try SQLiteLedgerStore(path: path)
            try await store.pool.write { db in try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v9: from the future')") }
        }
        let error = #expect(throws: StorageError.self) { try SQLiteLedgerStore(path: path) }
        #expect(error?.message == "cannot open the SQLite database at \(path): it was migrated by a newer Storekeeper (migrations this version does not know: v9: from the future); run that version, or restore a backup made with this one")
        let applied = try await DatabaseQueue(path: path).read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid") }
        #expect(applied == SQLiteLedgerStore.migrator.migrations + ["v9: from the future"])
    }

    @Test("a new database gets every migration at its first open")
    func newDatabase() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-new-\(UUID()).sqlite").path
        #expect(try SQLiteLedgerStore(path: path).migrationsApplied == SQLiteLedgerStore.migrator.migrations)
        #expect(try SQLiteLedgerStore(path: path).migrationsApplied == [])
    }
}
