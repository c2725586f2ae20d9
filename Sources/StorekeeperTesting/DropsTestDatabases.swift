package import Testing

/// Drops, after each test of the suite, the databases it created on the test server
/// (``PostgresTestDatabase/droppingCreated(_:failed:)``); one that cannot be dropped is a recorded issue, not a
/// silent leftover.
package struct DropsTestDatabases: SuiteTrait, TestTrait, TestScoping {
    package var isRecursive: Bool { true }

    package func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? { testCase == nil ? nil : self }

    package func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await PostgresTestDatabase.droppingCreated(function) { Issue.record($0) }
    }
}

extension Trait where Self == DropsTestDatabases {
    /// See ``DropsTestDatabases``.
    package static var dropsTestDatabases: Self { DropsTestDatabases() }
}

extension Trait where Self == ConditionTrait {
    /// Runs the suite or test only when `STOREKEEPER_TEST_POSTGRES_URL` is set, and says so when it is not.
    package static var needsPostgres: Self {
        .enabled(if: PostgresTestDatabase.isConfigured, Comment(rawValue: PostgresTestDatabase.skipReason))
    }
}

extension Backend: CustomTestStringConvertible {
    package var testDescription: String { rawValue }
}
