import Foundation
import GRDB
@testable import StorekeeperSQLite
import Testing

@Suite("SQLite ledger: query plans of the read path")
struct SQLiteQueryPlanTests {
    /// What SQLite's planner will do for `sql` in a freshly migrated ledger, one line per step.
    static func detail(_ sql: String, _ arguments: StatementArguments) async throws -> [String] {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("plan-\(UUID()).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try SQLiteLedgerStore(path: path)
        return try await store.pool.read { db in try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String } }
    }

    @Test("a customer's subscriptions are found through their tokens by index, not by scanning the environment's transactions")
    func familiesByToken() async throws {
        let steps = try await Self.detail(SQLiteLedgerStore.familiesByTokenSQL, ["00000000-0000-4000-8000-000000000001", "Sandbox"])
        #expect(steps == ["SEARCH transactions USING COVERING INDEX transactions_by_token (app_account_token=? AND environment=?)"], "\(steps)")
    }

    @Test("a family's transactions are read latest first from the covering index, without sorting")
    func familyOrder() async throws {
        let steps = try await Self.detail(SQLiteLedgerStore.familyOrderSQL, ["Sandbox", "2000000000000001"])
        #expect(steps == ["SEARCH transactions USING COVERING INDEX transactions_latest_first (environment=? AND original_transaction_id=?)"], "\(steps)")
    }
}
