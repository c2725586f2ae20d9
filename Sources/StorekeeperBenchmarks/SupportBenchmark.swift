import AppStoreSigning
import Foundation
import NIOHTTP1
import StorekeeperCore

extension ServerBenchmark {
    /// How `bench support` runs.
    package struct SupportOptions: Sendable {
        /// Customers in the ledger (half with a lifetime unlock, half with a monthly subscription), each purchase with
        /// the customer's app account token.
        package var customers = 10_000
        /// Months of renewals of each subscriber.
        package var renewals = 12
        /// Requests of each kind.
        package var count = 2_000
        package var concurrency = 16
        package var storage = Storage.sqlite

        package init() {}
    }

    /// What `bench support` prints: each kind of request at full speed.
    package struct SupportResult: Codable, Sendable {
        package var benchmark = "support"
        package var storage: String
        package var customers: Int
        package var renewalNotificationsSeeded: Int
        /// `GET /v1/support/search?q=` by customer ID, original transaction ID (also a transaction ID), app account token.
        package var searchByCustomerId: Run
        package var searchByTransactionId: Run
        package var searchByAppAccountToken: Run
        /// `GET /v1/support/customers/{id}`: state, purchases, timeline and audit.
        package var customerPage: Run
        /// `GET /v1/support/overview`: the app's figures over 30 days (what the dashboard's overview shows), one
        /// request at a time.
        package var overview: Run
    }

    /// Seeds a ledger through the app API and the webhook, then measures support searches and customer pages over
    /// HTTP with a support key.
    package static func support(_ options: SupportOptions) async throws -> SupportResult {
        // Built and seeded 5,000 customers at a time: a year of renewals of 100,000 customers does not fit in memory at once.
        return try await withServer(storage: options.storage, cacheCapacity: 0) { ports, key, _, description in
            var ids: [(customer: String, transaction: String, token: String)] = []
            var renewalsSeeded = 0
            for first in stride(from: 0, to: options.customers, by: 5_000) {
                let (purchases, history, _) = try makeSubscribers(
                    customers: min(5_000, options.customers - first), renewals: options.renewals, changes: false, appAccountTokens: true,
                    first: first)
                // The IDs support is given, read from the transactions the app submitted.
                for (customer, jws) in purchases {
                    let segments = jws.split(separator: ".")
                    guard segments.count == 3, let payload = try? Base64URL.decode(segments[1].utf8),
                        let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
                        let transaction = object["transactionId"] as? String, let token = object["appAccountToken"] as? String
                    else { throw VerifyBenchmark.BenchmarkError(message: "a seeded transaction of \(customer) has no transaction ID or token") }
                    ids.append((customer, transaction, token))
                }
                let seeding = try await seed(purchases, history: history, ports: ports, apiKey: key)
                await seeding.close()
                renewalsSeeded += history.count
            }
            // Spread over the customers (7,919 is prime: every customer in turn when count exceeds them).
            let picks = (0..<options.count).map { ids[($0 * 7_919) % ids.count] }
            let headers = [("Authorization", "Bearer \(key).support")]
            func run(
                _ path: @escaping @Sendable ((customer: String, transaction: String, token: String)) -> String, sequential: Bool = false
            ) async throws -> Run {
                let measured = try await drive(
                    sequential ? Array(picks.prefix(30)) : picks, ports: ports, concurrency: sequential ? 1 : options.concurrency, rate: nil
                ) { connection, pick in
                    try await connection.send(.GET, path(pick), headers: headers)
                }
                guard measured.failures == 0 else { throw VerifyBenchmark.BenchmarkError(message: "\(measured.failures) support requests failed") }
                return measured
            }
            return SupportResult(
                storage: description, customers: options.customers, renewalNotificationsSeeded: renewalsSeeded,
                searchByCustomerId: try await run { "/v1/support/search?q=\($0.customer)" },
                searchByTransactionId: try await run { "/v1/support/search?q=\($0.transaction)" },
                searchByAppAccountToken: try await run { "/v1/support/search?q=\($0.token)" },
                customerPage: try await run { "/v1/support/customers/\($0.customer)?environment=Sandbox" },
                overview: try await run({ _ in "/v1/support/overview?environment=Sandbox&days=30" }, sequential: true))
        }
    }
}
