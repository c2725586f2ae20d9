import AppStoreModels
import Foundation
import Logging
import PostgresNIO
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperPostgres

/// A notification's or a read's cost must not grow with the ledger. The store's statements are prepared once per
/// connection, and PostgreSQL soon runs each with one generic plan, made from the statistics of the moment (empty
/// tables, at first) and kept as the tables grow. So the generic plan of every prepared statement, on a migrated
/// empty ledger, must find its rows by a key: each index scan's conditions are on the index's leading columns.
@Suite("PostgreSQL ledger: query plans", .needsPostgres, .dropsTestDatabases)
struct PostgresQueryPlanTests {
    static var statements: [any PreparedStatementText.Type] {
        [
            LockStatement.self, LockAndClaimStatement.self, LockAndClaimAllStatement.self, WriteStatement.self,
            PostgresLedgerStore.FamilyRowsStatement.self, PostgresLedgerStore.OneFamilyRowsStatement.self,
            PostgresLedgerStore.CustomerRowsStatement.self, PostgresLedgerStore.EntitlementRowsStatement.self,
        ]
    }

    static let ledgerTables: Set = ["transactions", "subscriptions", "customer_links", "token_owners", "notifications", "jws_headers"]

    /// Every scan of a plan (in `EXPLAIN (FORMAT JSON)`'s tree): its node type, table, index and index condition.
    static func scans(_ node: [String: Any]) -> [(type: String, table: String?, index: String?, condition: String?, filter: String?)] {
        var found: [(type: String, table: String?, index: String?, condition: String?, filter: String?)] = []
        if let type = node["Node Type"] as? String, type.contains("Scan") {
            found.append(
                (type, node["Relation Name"] as? String, node["Index Name"] as? String, node["Index Cond"] as? String, node["Filter"] as? String))
        }
        for child in node["Plans"] as? [[String: Any]] ?? [] { found += scans(child) }
        return found
    }

    /// The columns an index condition tests and how, in the order written (`((x.environment = f.env) AND (x.id = f.id))`).
    static func columns(of condition: String) -> [(column: String, operator: String)] {
        condition.matches(of: #/\((?:\w+\.)?(\w+) (=|<|>|<=|>=) /#).map { (String($0.output.1), String($0.output.2)) }
    }

    @Test("a ledger migrated by the version before the subscription index changed is migrated once more and keeps its subscriptions")
    func upgradeFromV2() async throws {
        let url = try await PostgresTestDatabase.create()
        try await PostgresTestDatabase.withClient(url) { client in
            try await client.withConnection { connection in
                try await connection.query(
                    "CREATE TABLE storekeeper_migrations (id TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    logger: Logger(label: "test"))
                for migration in PostgresSchema.migrations.prefix(2) {
                    for statement in PostgresSchema.statements(migration.sql) {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: Logger(label: "test"))
                    }
                    try await connection.query("INSERT INTO storekeeper_migrations (id) VALUES (\(migration.id))", logger: Logger(label: "test"))
                }
                try await connection.query(
                    "INSERT INTO subscriptions (environment, original_transaction_id, bundle_id) VALUES ('Sandbox', '2000000000000001', 'com.example.storekeeper')",
                    logger: Logger(label: "test"))
            }
        }
        let store = try await PostgresLedgerStore.open(url)
        // v3, and every migration after it.
        #expect(store.migrationsApplied == PostgresSchema.migrations.dropFirst(2).map(\.id))
        #expect(store.migrationsApplied.first == "v3: subscriptions by app, app first")
        #expect(try await store.subscriptionFamilies(bundleId: "com.example.storekeeper", environment: .sandbox) == ["2000000000000001"])
        await store.close()
        let indexes = try await PostgresTestDatabase.withClient(url) { client in
            var names: [String] = []
            for try await name in try await client.query("SELECT indexname::text FROM pg_indexes WHERE tablename = 'subscriptions' ORDER BY 1")
                .decode(String.self)
            {
                names.append(name)
            }
            return names
        }
        #expect(indexes == ["subscriptions_of_app", "subscriptions_pkey"])
    }

    @Test("every prepared statement's generic plan, made on an empty ledger, finds rows by the leading columns of an index and scans no ledger table")
    func genericPlansUseKeys() async throws {
        let url = try await PostgresTestDatabase.create()
        try await PostgresLedgerStore.open(url).close()
        let problems = try await Self.planProblems(url)
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    /// What is wrong with the generic plans of the store's statements in `url`'s database: each a statement's name and
    /// the scan that is not by a key.
    static func planProblems(_ url: PostgresDatabaseURL) async throws -> [String] {
        try await PostgresTestDatabase.withClient(url) { client in
            try await client.withConnection { connection in
                let logger = Logger(label: "test")
                var indexColumns: [String: [String]] = [:]
                for try await (index, column, position) in try await connection.query(
                    """
                    SELECT c.relname::text, a.attname::text, k.n::int FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
                    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                    JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' ORDER BY 1, 3
                    """, logger: logger
                ).decode((String, String, Int).self) {
                    #expect(indexColumns[index, default: []].count == position - 1)
                    indexColumns[index, default: []].append(column)
                }
                try await connection.query("SET plan_cache_mode = force_generic_plan", logger: logger)
                var problems: [String] = []
                for statement in Self.statements {
                    let parameters = Set(statement.sql.matches(of: /\$(\d+)/).compactMap { Int($0.output.1) }).max() ?? 0
                    try await connection.query(PostgresQuery(unsafeSQL: "PREPARE plan_test AS \(statement.sql)"), logger: logger)
                    let nulls = Array(repeating: "NULL", count: parameters).joined(separator: ", ")
                    var text = ""
                    for try await json in try await connection.query(
                        PostgresQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) EXECUTE plan_test" + (parameters > 0 ? "(\(nulls))" : "")), logger: logger
                    ).decode(String.self) { text += json }
                    try await connection.query("DEALLOCATE plan_test", logger: logger)
                    let plans = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]])
                    let scans = plans.flatMap { ($0["Plan"] as? [String: Any]).map(Self.scans) ?? [] }
                    if scans.isEmpty { problems.append("\(statement.name): no plan read from \(text.prefix(200))") }
                    for scan in scans {
                        if scan.type == "Seq Scan", let table = scan.table, Self.ledgerTables.contains(table) {
                            problems.append("\(statement.name): a sequential scan of \(table)")
                        }
                        guard let index = scan.index else { continue }
                        // The condition's columns must be the index's first ones, each but the last tested for
                        // equality: a column further in, with one before it untested or a range, is checked entry by
                        // entry over a range that grows with the table. And no row the index finds may be filtered
                        // out after (the index would be searched by fewer columns than the statement names).
                        let tested = Self.columns(of: scan.condition ?? "")
                        let leading = indexColumns[index, default: []].prefix(tested.count)
                        if tested.isEmpty || Set(leading) != Set(tested.map(\.column)) || tested.dropLast().contains(where: { $0.operator != "=" }) {
                            problems.append(
                                "\(statement.name): \(index) (\(indexColumns[index, default: []].joined(separator: ", "))) searched by \(scan.condition ?? "nothing")"
                            )
                        }
                        if let filter = scan.filter, let table = scan.table, Self.ledgerTables.contains(table) {
                            problems.append("\(statement.name): \(index) on \(table) searched, then filtered by \(filter)")
                        }
                    }
                }
                return problems
            }
        }
    }
}
