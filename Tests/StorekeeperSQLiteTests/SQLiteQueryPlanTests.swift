import AppStoreModels
import AppStoreSimulator
import Foundation
import GRDB
import StorekeeperCore
import StorekeeperTesting
import Synchronization
import Testing

@testable import StorekeeperSQLite

/// A read's cost must not grow with the ledger: every statement the store runs finds its rows through an index.
@Suite("SQLite ledger: query plans")
struct SQLiteQueryPlanTests {
    /// The SQL of every statement a store ran.
    final class StatementLog: Sendable {
        private let statements = Mutex<Set<String>>([])
        func add(_ sql: String) { _ = statements.withLock { $0.insert(sql) } }
        var all: Set<String> { statements.withLock { $0 } }
    }

    static func temporaryPath() -> String {
        TestFiles.directory.appendingPathComponent("plan-\(UUID()).sqlite").path
    }

    /// What SQLite's planner does for `sql` in a migrated ledger, one line per step; each `?` or `?N` is bound to a
    /// string (the plan of an equality does not depend on the value).
    static func plan(_ sql: String, in store: SQLiteLedgerStore) async throws -> [String] {
        let numbered = Set(sql.matches(of: /\?(\d+)/).map { $0.output.1 }).count
        let count = numbered > 0 ? numbered : sql.filter { $0 == "?" }.count
        let arguments = StatementArguments(Array(repeating: "x", count: count))
        return try await store.pool.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String }
        }
    }

    /// Statements that are not the ledger's queries: transactions, pragmas, schema changes, GRDB's bookkeeping, and a
    /// trigger's statements (traced as `-- …`; the consumption-request trigger inserts by primary key).
    static func isLedgerQuery(_ sql: String) -> Bool {
        let head = sql.trimmingCharacters(in: .whitespacesAndNewlines).uppercased()
        let others = ["PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "CREATE", "ALTER", "DROP", "--"]
        return !others.contains { head.hasPrefix($0) } && !sql.contains("sqlite_") && !sql.contains("grdb_") && !sql.contains("json_extract")
    }

    @Test("no statement the store runs for the shipped scenarios and customers with tokens scans a table or searches one by environment alone")
    func everyStatement() async throws {
        let log = StatementLog()
        for name in ShippedScenarios.all.map(\.name) + ["tokens"] {
            var harness = SimulatorFixture()
            if name == "tokens" {
                let token = LowercaseUUID(UUID())
                for customer in ["tina", "ursula"] { try harness.engine.createCustomer(id: customer) }
                _ = try harness.engine.purchase(.init(customerId: "tina", productId: "pro.monthly", appAccountToken: token))
                _ = try harness.engine.purchase(.init(customerId: "ursula", productId: "coins.100", appAccountToken: token))
            } else {
                try await harness.play(name)
            }
            let store = try SQLiteLedgerStore(path: Self.temporaryPath(), unsafeFaultInjection: nil, statementTrace: log.add)
            try await harness.submitAll(to: store)
            for notification in try await harness.verifiedNotifications() { _ = try await store.apply(notification) }
            for customer in harness.engine.groundTruth().map(\.customerId) + ["nobody"] {
                _ = try await store.customerExists(customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                _ = try await store.ledger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
                _ = try await store.entitlementLedger(for: customer, bundleId: "com.example.storekeeper", environment: .sandbox)
            }
        }
        // The migrations' statements run once per database, over whole tables by design: what opening an empty
        // ledger runs is left out.
        let migrations = StatementLog()
        _ = try SQLiteLedgerStore(path: Self.temporaryPath(), unsafeFaultInjection: nil, statementTrace: migrations.add)
        let queries = log.all.subtracting(migrations.all).filter(Self.isLedgerQuery)
        #expect(queries.count >= 10, "\(queries.sorted())")
        #expect(queries.contains(SQLiteLedgerStore.familiesByTokenSQL) && queries.contains(SQLiteLedgerStore.familyOrderSQL))
        // The outbox's read of a customer (tokens, families, grants, recorded state in one statement) among them.
        #expect(queries.contains(SQLiteWriteTransaction.outboxCustomerSQL))
        let store = try SQLiteLedgerStore(path: Self.temporaryPath())
        for sql in queries.sorted() {
            let steps = try await Self.plan(sql, in: store)
            #expect(!steps.contains { $0.hasPrefix("SCAN") && $0 != "SCAN CONSTANT ROW" }, "\(sql)\n\(steps)")
            // Every table is keyed by environment first: a search on the environment alone reads all of it, whatever
            // the table's name or alias in the statement.
            #expect(!steps.contains { $0.hasPrefix("SEARCH ") && $0.hasSuffix("(environment=?)") }, "\(sql)\n\(steps)")
            // Nor on an app alone (all its transactions), nor by purchase dates: those indexes are the overview's.
            #expect(
                !steps.contains { $0.hasPrefix("SEARCH ") && ($0.hasSuffix("(bundle_id=? AND environment=?)") || $0.contains("purchase_date>?")) },
                "\(sql)\n\(steps)")
        }
        // The overview's window reads its range of dates and the app's refunds by their indexes, never the history.
        for sql in [SQLiteLedgerStore.overviewQueries.window, SQLiteLedgerStore.overviewQueries.subscriptions] {
            let steps = try await Self.plan(sql, in: store)
            #expect(!steps.contains { $0.hasPrefix("SCAN") }, "\(sql)\n\(steps)")
        }
        let window = try await Self.plan(SQLiteLedgerStore.overviewQueries.window, in: store)
        #expect(window.contains { $0.contains("transactions_by_purchase_date (purchase_date>? AND purchase_date<?)") }, "\(window)")
    }

    @Test("a customer's subscriptions are found through their tokens by index, not by scanning the environment's transactions")
    func familiesByToken() async throws {
        let store = try SQLiteLedgerStore(path: Self.temporaryPath())
        let steps = try await Self.plan(SQLiteLedgerStore.familiesByTokenSQL, in: store)
        #expect(steps == ["SEARCH transactions USING COVERING INDEX transactions_by_token (app_account_token=? AND environment=?)"], "\(steps)")
    }

    @Test("a family's transactions are read latest first from the covering index, without sorting")
    func familyOrder() async throws {
        let store = try SQLiteLedgerStore(path: Self.temporaryPath())
        let steps = try await Self.plan(SQLiteLedgerStore.familyOrderSQL, in: store)
        #expect(
            steps == ["SEARCH transactions USING COVERING INDEX transactions_latest_first (environment=? AND original_transaction_id=?)"], "\(steps)")
    }
}
