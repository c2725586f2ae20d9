import Foundation
import Logging
import PostgresNIO
import StorekeeperCore
import StorekeeperPostgres
import Synchronization

/// The PostgreSQL server the tests may use: `STOREKEEPER_TEST_POSTGRES_URL` (`.ci/run` starts a throwaway cluster
/// and sets it). Each store under test gets a database of its own, created here, so tests run in parallel.
enum PostgresTestDatabase {
    static let url: PostgresDatabaseURL? = {
        guard let text = ProcessInfo.processInfo.environment["STOREKEEPER_TEST_POSTGRES_URL"], !text.isEmpty else { return nil }
        return try? PostgresDatabaseURL(text)
    }()

    static let skipReason: Comment = "STOREKEEPER_TEST_POSTGRES_URL is not set: the PostgreSQL tests are skipped (.ci/run sets it)"

    struct NotConfigured: Error {}

    /// The databases the running test created (set by ``DropsTestDatabases``).
    @TaskLocal static var created: Created?

    final class Created: Sendable {
        let urls = Mutex<[PostgresDatabaseURL]>([])
    }

    /// A new, empty database on the test server, dropped after the test when its suite has ``DropsTestDatabases``.
    static func create() async throws -> PostgresDatabaseURL {
        guard let base = url else { throw NotConfigured() }
        let created = try await base.creatingDatabase(named: "storekeeper_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16))
        Self.created?.urls.withLock { $0.append(created) }
        return created
    }

    /// Runs `body` with a client of `url`'s database.
    static func withClient<T: Sendable>(_ url: PostgresDatabaseURL, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        let client = PostgresClient(configuration: try url.clientConfigurationForTests(), backgroundLogger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }

    static func openStore(unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil) async throws -> PostgresLedgerStore {
        try await PostgresLedgerStore.open(try await create(), unsafeFaultInjection: unsafeFaultInjection)
    }
}

import Testing

/// Drops, after each test of the suite, the databases the test created on the test server (connections it left open
/// are ended: `DROP DATABASE … WITH (FORCE)`), so that a developer's own PostgreSQL server does not collect a few
/// dozen databases per run. A database that cannot be dropped is a failed expectation, not a silent leftover.
struct DropsTestDatabases: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let created = PostgresTestDatabase.Created()
        let outcome: Result<Void, any Error>
        do {
            try await PostgresTestDatabase.$created.withValue(created) { try await function() }
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        for url in created.urls.withLock({ $0 }) {
            do {
                try await url.droppingDatabase(closingConnections: true)
            } catch {
                Issue.record("the test database \(url.database) was not dropped: \(error)")
            }
        }
        try outcome.get()
    }
}

extension Trait where Self == DropsTestDatabases {
    /// See ``DropsTestDatabases``.
    static var dropsTestDatabases: Self { DropsTestDatabases() }
}
