import ArgumentParser
import StorekeeperBenchmarks

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure Storekeeper's performance on this machine (results as JSON).",
        subcommands: [VerifyBench.self, IngestBench.self, EntitlementsBench.self]
    )

    struct VerifyBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Verifications per second on one core: warm cache, no cache, whole notification, raw P-256."
        )

        @Option(help: "Seconds per measurement (four measurements).")
        var seconds: Double = 3

        func validate() throws {
            guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be between 0 and 600") }
        }

        func run() async throws {
            try JSONOutput.print(try await VerifyBenchmark.run(seconds: seconds))
        }
    }

    struct IngestBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ingest",
            abstract: "Notifications posted over loopback HTTP by concurrent clients into a server on SQLite (durable commits)."
        )
        @Option(help: "Notifications at full speed (half as many at half the rate).") var count: Int = 3000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16

        func run() async throws {
            try JSONOutput.print(try await ServerBenchmark.ingest(count: count, concurrency: concurrency))
        }
    }

    struct EntitlementsBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "entitlements", abstract: "Customer reads over loopback HTTP by concurrent clients."
        )
        @Option(help: "Reads at full speed (half as many at half the rate).") var count: Int = 20000
        @Option(help: "Customers in the ledger.") var customers: Int = 1000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16

        func run() async throws {
            try JSONOutput.print(try await ServerBenchmark.entitlements(count: count, customers: customers, concurrency: concurrency))
        }
    }
}
