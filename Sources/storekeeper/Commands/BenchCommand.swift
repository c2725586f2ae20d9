import AppStoreModels
import ArgumentParser
import Foundation
import StorekeeperBenchmarks
import StorekeeperPostgres

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure Storekeeper's performance on this machine (results as JSON).",
        subcommands: [
            VerifyBench.self, ReceiptsBench.self, IngestBench.self, EventsBench.self, EntitlementsBench.self, SupportBench.self, MemoryBench.self,
            SimulatorBench.self,
            ReconcileBench.self,
            ImportBench.self,
        ]
    )

    struct VerifyBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract:
                "Verifications per second on one core: warm cache, no cache, whole notification, raw P-256; and decodes per second of its nested payloads, by JSONDecoder and by the read path's decoders."
        )

        @Option(help: "Seconds per measurement (six measurements).")
        var seconds: Double = 3

        func validate() throws {
            guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be between 0 and 600") }
        }

        func run() async throws {
            try JSONOutput.print(try await VerifyBenchmark.run(seconds: seconds))
        }
    }

    struct ReceiptsBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "receipts",
            abstract:
                "App receipts parsed and verified per second on one core (chain checks remembered, and not), next to raw RSA verification of the same signature."
        )

        @Option(help: "The receipt measured (base64 or DER), verified at its creation date.")
        var receipt = "../shared/conformance/apple-receipts/sandbox-2025-tpiar-g5.b64"

        @Option(help: "Seconds per measurement (four measurements).")
        var seconds: Double = 3

        func validate() throws {
            guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be between 0 and 600") }
        }

        func run() async throws {
            try JSONOutput.print(try await ReceiptBenchmark.run(receipt: receipt, seconds: seconds))
        }
    }

    struct IngestBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ingest",
            abstract: "Notifications posted over loopback HTTP by concurrent clients into a server on SQLite or PostgreSQL (durable commits)."
        )
        @Option(help: "Notifications at full speed (half as many at half the rate).") var count: Int = 3000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16
        @OptionGroup var storage: BenchStorageOptions

        func validate() throws {
            try storage.validate()
            guard (10...1_000_000).contains(count) else { throw ValidationError("--count must be 10 to 1000000, not \(count)") }
            guard (1...1_024).contains(concurrency) else { throw ValidationError("--concurrency must be 1 to 1024, not \(concurrency)") }
        }

        func run() async throws {
            try JSONOutput.print(try await ServerBenchmark.ingest(count: count, concurrency: concurrency, storage: storage.storage))
        }
    }

    struct EventsBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "events",
            abstract:
                "The outbox's cost to ingestion (outbox on and off, alternated) and webhook delivery to a local receiver (events per second, commit to delivery)."
        )
        @Option(help: "Notifications per round (each from a customer with a server-issued token).") var count: Int = 2000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16
        @Option(help: "Rounds of ingestion with the outbox on, then off, each on a fresh server.") var rounds: Int = 3
        @Option(
            help:
                "Pairs of segments of --count notifications on one server, the outbox on and off in turns (0: none; with pairs, --rounds may be 0)."
        ) var pairs: Int = 0
        @Flag(help: "Measure ingestion only.") var noDelivery = false
        @OptionGroup var storage: BenchStorageOptions

        func validate() throws {
            try storage.validate()
            guard (0...100).contains(pairs) else { throw ValidationError("--pairs must be 0 to 100, not \(pairs)") }
            guard ((pairs > 0 ? 0 : 1)...20).contains(rounds) else {
                throw ValidationError("--rounds must be 1 to 20 (0 with --pairs), not \(rounds)")
            }
            guard (10...100_000).contains(count) else { throw ValidationError("--count must be 10 to 100000") }
            guard (1...1_024).contains(concurrency) else { throw ValidationError("--concurrency must be 1 to 1024, not \(concurrency)") }
        }

        func run() async throws {
            try JSONOutput.print(
                try await EventsBenchmark.run(
                    count: count, concurrency: concurrency, rounds: rounds, pairs: pairs, storage: storage.storage, delivery: !noDelivery)
            )
        }
    }

    struct EntitlementsBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "entitlements", abstract: "Customer reads over loopback HTTP by concurrent clients."
        )
        @Option(help: "Reads at full speed (half as many at half the rate).") var count: Int = 20000
        @Option(help: "Customers in the ledger.") var customers: Int = 1000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16
        @Option(help: "Months of renewals each subscriber has before the reads (more transactions per read).") var renewals: Int = 0
        @Option(help: "The server's customer-cache capacity (0: every read goes to the ledger).") var cacheCapacity: Int = 10_000
        @Flag(help: "Each purchase carries the customer's app account token (reads also look customers up by token).")
        var appAccountTokens = false
        @Option(help: "Consumable purchases each customer makes besides (more purchases per read).") var consumables: Int = 0
        @Option(help: "Notifications per second posted during the reads, each changing one customer's answer.") var writeRate: Double = 0
        @Option(
            help: ArgumentHelp(
                "Before measuring, keep the seeded server up this many seconds for another load generator (e.g. wrk); "
                    + "its API key is read from STOREKEEPER_BENCH_API_KEY.",
                valueName: "seconds"
            ))
        var externalLoad: Double?
        @OptionGroup var storage: BenchStorageOptions

        func validate() throws {
            try storage.validate()
            guard count > 0, customers > 0, concurrency > 0 else { throw ValidationError("--count, --customers and --concurrency must be positive") }
            guard cacheCapacity >= 0, writeRate >= 0, (0...120).contains(renewals), (0...10_000).contains(consumables) else {
                throw ValidationError("--cache-capacity and --write-rate cannot be negative; --renewals is 0 to 120, --consumables 0 to 10000")
            }
            if externalLoad != nil, ProcessInfo.processInfo.environment["STOREKEEPER_BENCH_API_KEY"]?.isEmpty ?? true {
                throw ValidationError("--external-load needs the API key for the other load generator in STOREKEEPER_BENCH_API_KEY")
            }
        }

        func run() async throws {
            var options = ServerBenchmark.EntitlementOptions()
            options.count = count
            options.customers = customers
            options.concurrency = concurrency
            options.cacheCapacity = cacheCapacity
            options.renewals = renewals
            options.storage = storage.storage
            options.appAccountTokens = appAccountTokens
            options.consumables = consumables
            options.writesPerSecond = writeRate
            options.externalLoad = externalLoad.map { ($0, ProcessInfo.processInfo.environment["STOREKEEPER_BENCH_API_KEY"] ?? "") }
            try JSONOutput.print(try await ServerBenchmark.entitlements(options))
        }
    }

    struct SupportBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "support",
            abstract: "Support searches and customer pages over loopback HTTP on a seeded ledger (customers with a year of renewals)."
        )
        @Option(help: "Customers in the ledger (half subscribers).") var customers: Int = 10_000
        @Option(help: "Months of renewals of each subscriber.") var renewals: Int = 12
        @Option(help: "Requests of each kind (search by customer ID, transaction ID, token; customer page).") var count: Int = 2_000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16
        @OptionGroup var storage: BenchStorageOptions

        func validate() throws {
            try storage.validate()
            guard count > 0, customers > 0, concurrency > 0, (0...120).contains(renewals) else {
                throw ValidationError("--count, --customers and --concurrency must be positive; --renewals is 0 to 120")
            }
        }

        func run() async throws {
            var options = ServerBenchmark.SupportOptions()
            options.customers = customers
            options.renewals = renewals
            options.count = count
            options.concurrency = concurrency
            options.storage = storage.storage
            try JSONOutput.print(try await ServerBenchmark.support(options))
        }
    }

    struct MemoryBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "memory",
            abstract: "The server's RSS, sampled while clients read uncached customers as fast as they can for a while (SQLite or PostgreSQL)."
        )
        @Option(help: "How long the clients read.") var seconds: Double = 300
        @Option(help: "Customers in the ledger, read round-robin.") var customers: Int = 2000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16
        @Option(help: "Seconds between RSS samples.") var sampleSeconds: Double = 10
        @OptionGroup var storage: BenchStorageOptions

        func validate() throws {
            try storage.validate()
            guard seconds > 0, customers > 0, concurrency > 0, sampleSeconds > 0 else {
                throw ValidationError("--seconds, --customers, --concurrency and --sample-seconds must be positive")
            }
        }

        func run() async throws {
            var options = MemoryBenchmark.Options()
            options.seconds = seconds
            options.customers = customers
            options.concurrency = concurrency
            options.sampleSeconds = sampleSeconds
            options.storage = storage.storage
            try JSONOutput.print(try await MemoryBenchmark.run(options))
        }
    }

    struct SimulatorBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "simulator",
            abstract: "App Store simulator: purchases over its control API by concurrent clients, notifications to a loopback receiver."
        )
        @Option(help: "Purchases (one notification each).") var purchases: Int = 10_000
        @Option(help: "Concurrent clients.") var concurrency: Int = 16
        @Option(help: "Customers the purchases are spread over.") var customers: Int = 100
        @Option(help: "The product bought (a consumable sends one notification per purchase).") var product: String = "coins.100"

        func validate() throws {
            guard purchases > 0, concurrency > 0, customers > 0 else {
                throw ValidationError("--purchases, --concurrency and --customers must be positive")
            }
        }

        func run() async throws {
            var options = SimulatorBenchmark.Options()
            options.purchases = purchases
            options.concurrency = concurrency
            options.customers = customers
            options.productId = product
            try JSONOutput.print(try await SimulatorBenchmark.run(options))
        }
    }

    struct ReconcileBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reconcile",
            abstract: "reconcile --all against a simulator enforcing Apple's rate limits: the request rate against the allowed one, and 429s."
        )
        @Option(help: "Subscriptions (one Apple account each) in the ledger.") var subscriptions: Int = 1000
        @Option(help: "Production (50 calls/s allowed) or Sandbox (5/s).") var environment: String = "Production"
        @Option(help: "Accounts reconciled at once (the rate limiter sets the pace).") var concurrency: Int = 8

        func validate() throws {
            guard subscriptions > 0, concurrency > 0 else { throw ValidationError("--subscriptions and --concurrency must be positive") }
            guard ["Production", "Sandbox"].contains(environment) else { throw ValidationError("--environment must be Production or Sandbox") }
        }

        func run() async throws {
            try JSONOutput.print(
                try await ReconcileBenchmark.run(
                    subscriptions: subscriptions, environment: AppStoreEnvironment(rawValue: environment), concurrency: concurrency
                ))
        }
    }
}

extension BenchCommand {
    struct ImportBench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import",
            abstract:
                "storekeeper import's run against a simulator enforcing Apple's rate limits: the request rate against the allowed one, and 429s."
        )
        @Option(help: "Customers (one Apple account each) to import by original transaction ID.") var customers: Int = 1000
        @Option(help: "Production (50 calls/s allowed) or Sandbox (5/s).") var environment: String = "Production"
        @Option(help: "Customers imported at once (the rate limiter sets the pace).") var concurrency: Int = 8

        func validate() throws {
            guard customers > 0, concurrency > 0 else { throw ValidationError("--customers and --concurrency must be positive") }
            guard ["Production", "Sandbox"].contains(environment) else { throw ValidationError("--environment must be Production or Sandbox") }
        }

        func run() async throws {
            try JSONOutput.print(
                try await ImportBenchmark.run(customers: customers, environment: AppStoreEnvironment(rawValue: environment), concurrency: concurrency)
            )
        }
    }
}

/// Where `bench ingest` and `bench entitlements` keep the ledger.
struct BenchStorageOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "A PostgreSQL server (postgres://…) on which the run creates, and then drops, a database of its own; "
                + "by default a temporary SQLite file.",
            valueName: "url"
        ))
    var database: String?
    @Option(help: "Servers sharing the PostgreSQL database, the clients spread over them (PostgreSQL only).") var instances: Int = 1

    func validate() throws {
        guard (1...16).contains(instances) else { throw ValidationError("--instances must be 1 to 16") }
        if let database, !PostgresDatabaseURL.isPostgres(database) {
            throw ValidationError("--database must be a postgres:// URL (the default is SQLite)")
        }
        if instances > 1, database == nil { throw ValidationError("--instances needs --database postgres://… (one SQLite file has one server)") }
    }

    var storage: ServerBenchmark.Storage { ServerBenchmark.Storage(postgres: database, instances: instances) }
}
