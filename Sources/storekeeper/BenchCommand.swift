import ArgumentParser
import StorekeeperBenchmarks

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure Storekeeper's performance on this machine (results as JSON).",
        subcommands: [VerifyBench.self]
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
}
