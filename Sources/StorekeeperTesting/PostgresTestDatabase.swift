import Foundation
import Logging
package import PostgresNIO
import StorekeeperCore
package import StorekeeperPostgres
import Synchronization

/// The PostgreSQL server the tests may use: `STOREKEEPER_TEST_POSTGRES_URL` (`.ci/run` starts a throwaway cluster
/// and sets it). Each store under test gets a database of its own, created here, so tests run in parallel.
package enum PostgresTestDatabase {
    /// The variable's text, as the CLI tests pass it to `storekeeper --database`.
    package static let urlText: String? = {
        guard let text = ProcessInfo.processInfo.environment["STOREKEEPER_TEST_POSTGRES_URL"], !text.isEmpty else { return nil }
        return text
    }()

    package static let url: PostgresDatabaseURL? = urlText.flatMap { try? PostgresDatabaseURL($0) }

    /// Whether the PostgreSQL tests run.
    package static var isConfigured: Bool { url != nil }

    /// What a skipped PostgreSQL suite says: the one message for every such suite.
    package static let skipReason = "STOREKEEPER_TEST_POSTGRES_URL is not set: the PostgreSQL tests are skipped (.ci/run sets it)"

    package struct NotConfigured: Error, CustomStringConvertible {
        package var description: String { PostgresTestDatabase.skipReason }
    }

    /// The databases the running test created (see ``droppingCreated(_:)``).
    @TaskLocal static var created: Created?

    final class Created: Sendable {
        let urls = Mutex<[PostgresDatabaseURL]>([])
    }

    /// Databases a test created that could not be dropped after it.
    package struct NotDropped: Error, CustomStringConvertible {
        package var databases: [String: String]
        package var description: String {
            databases.sorted { $0.key < $1.key }.map { "the test database \($0.key) was not dropped: \($0.value)" }.joined(separator: "; ")
        }
    }

    /// Runs `body`, then drops every database it created on the test server (connections it left open are ended:
    /// `DROP DATABASE … WITH (FORCE)`), so that a developer's own server does not collect a few dozen databases per
    /// run. Gives `body`'s outcome; a database that cannot be dropped is a ``NotDropped`` error in `failed`.
    package static func droppingCreated(
        _ body: () async throws -> Void, failed: (NotDropped) -> Void
    ) async throws {
        let created = Created()
        let outcome: Result<Void, any Error>
        do {
            try await $created.withValue(created) { try await body() }
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        var notDropped: [String: String] = [:]
        for url in created.urls.withLock({ $0 }) {
            do {
                try await url.droppingDatabase(closingConnections: true)
            } catch {
                notDropped[url.database] = "\(error)"
            }
        }
        if !notDropped.isEmpty { failed(NotDropped(databases: notDropped)) }
        try outcome.get()
    }

    /// A new, empty database on the test server, dropped after the test when it runs in ``droppingCreated(_:failed:)``.
    package static func create() async throws -> PostgresDatabaseURL {
        guard let base = url else { throw NotConfigured() }
        let created = try await base.creatingDatabase(
            named: "storekeeper_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16))
        Self.created?.urls.withLock { $0.append(created) }
        return created
    }

    /// Runs `body` with a client of `url`'s database.
    package static func withClient<T: Sendable>(_ url: PostgresDatabaseURL, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        let client = PostgresClient(
            configuration: try url.clientConfigurationForTests(), backgroundLogger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }

    package static func openStore(unsafeFaultInjection: (@Sendable (String) throws -> Void)? = nil) async throws -> PostgresLedgerStore {
        try await PostgresLedgerStore.open(try await create(), unsafeFaultInjection: unsafeFaultInjection)
    }
}
