import Foundation
import Logging
import PostgresNIO
import StorekeeperCore
import StorekeeperPostgres

/// The PostgreSQL server the tests may use: `STOREKEEPER_TEST_POSTGRES_URL` (`.ci/run` starts a throwaway cluster
/// and sets it). Each store under test gets a database of its own, created here, so tests run in parallel.
enum PostgresTestDatabase {
    static let url: PostgresDatabaseURL? = {
        guard let text = ProcessInfo.processInfo.environment["STOREKEEPER_TEST_POSTGRES_URL"], !text.isEmpty else { return nil }
        return try? PostgresDatabaseURL(text)
    }()

    static let skipReason: Comment = "STOREKEEPER_TEST_POSTGRES_URL is not set: the PostgreSQL tests are skipped (.ci/run sets it)"

    struct NotConfigured: Error {}

    /// A new, empty database on the test server.
    static func create() async throws -> PostgresDatabaseURL {
        guard let base = url else { throw NotConfigured() }
        return try await base.creatingDatabase(named: "storekeeper_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16))
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
