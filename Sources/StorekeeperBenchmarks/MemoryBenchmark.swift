import Foundation
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperPostgres
import Synchronization

/// Memory under a long run of uncached customer reads: the server's resident set size sampled while clients read as
/// fast as they can for a given time, on SQLite or PostgreSQL. A server that keeps something per read grows; one that
/// does not levels off once its caches and buffers are warm (`bench memory`, BENCHMARKS.md).
package enum MemoryBenchmark {
    package struct Options: Sendable {
        /// How long the clients read.
        package var seconds: Double = 300
        package var customers = 2_000
        package var concurrency = 16
        /// Seconds between RSS samples.
        package var sampleSeconds: Double = 10
        package var storage = ServerBenchmark.Storage.sqlite

        package init() {}
    }

    /// The process's RSS at a moment of the run.
    package struct Sample: Codable, Sendable {
        package var seconds: Double
        package var rssMB: Double
        package var reads: Int
    }

    package struct Result: Codable, Sendable {
        package var benchmark = "memory"
        package var storage: String
        package var seconds: Double
        package var reads: Int
        package var readsPerSecond: Double
        package var failures: Int
        /// RSS once the ledger is seeded, before the reads; at the end of the first minute of reads; at the end; the most.
        package var rssBeforeMB: Double
        package var rssAfterFirstMinuteMB: Double?
        package var rssEndMB: Double
        package var rssMaxMB: Double
        /// How fast RSS grew over the second half of the run, in MB a minute (flat: about 0).
        package var growthMBPerMinuteSecondHalf: Double
        /// Bytes of RSS growth per read over the second half of the run.
        package var bytesPerReadSecondHalf: Double
        /// PostgreSQL: connections the store checked out from postgres-nio's pool during the run.
        package var connectionCheckouts: Int?
        package var samples: [Sample]
    }

    /// What the clients and the sampler count, shared.
    final class Counts: Sendable {
        let reads = Atomic<Int>(0)
        let failures = Atomic<Int>(0)
        let samples = Mutex<[Sample]>([])
    }

    /// The resident set size of this process, in MB (Linux's `/proc/self/status`; 0 where there is none).
    static func residentMB() -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return (kilobytes / 1024 * 10).rounded() / 10
    }

    package static func run(_ options: Options) async throws -> Result {
        let (purchases, history, _) = try ServerBenchmark.makeSubscribers(customers: options.customers, renewals: 0, changes: false)
        return try await ServerBenchmark.withServer(storage: options.storage, cacheCapacity: 0) { ports, key, store, description in
            let seeding = try await ServerBenchmark.seed(purchases, history: history, ports: ports, apiKey: key)
            await seeding.close()
            let checkoutsBefore = (store as? PostgresLedgerStore)?.connectionCheckouts
            let before = residentMB()
            let counts = Counts()
            let clock = ContinuousClock()
            let start = clock.now
            let deadline = start + .milliseconds(Int64(options.seconds * 1000))
            counts.samples.withLock { $0 = [Sample(seconds: 0, rssMB: before, reads: 0)] }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while clock.now < deadline {
                        try? await Task.sleep(for: .milliseconds(Int64(options.sampleSeconds * 1000)))
                        let sample = Sample(
                            seconds: ((clock.now - start) / .seconds(1)).rounded(), rssMB: residentMB(), reads: counts.reads.load(ordering: .relaxed)
                        )
                        counts.samples.withLock { $0.append(sample) }
                    }
                }
                for worker in 0..<options.concurrency {
                    group.addTask {
                        var connection = try await LoadConnection.connect(host: "127.0.0.1", port: ports[worker % ports.count])
                        var index = worker
                        while clock.now < deadline {
                            let id = "customer-\(index % options.customers)"
                            index += options.concurrency
                            do {
                                let status = try await connection.send(
                                    .GET, "/v1/customers/\(id)?environment=Sandbox", headers: [("Authorization", "Bearer \(key)")])
                                if status != 200 { counts.failures.add(1, ordering: .relaxed) }
                            } catch {
                                counts.failures.add(1, ordering: .relaxed)
                                await connection.close()
                                connection = try await LoadConnection.connect(host: "127.0.0.1", port: ports[worker % ports.count])
                            }
                            counts.reads.add(1, ordering: .relaxed)
                        }
                        await connection.close()
                    }
                }
                try await group.waitForAll()
            }
            let seconds = (clock.now - start) / .seconds(1)
            let all = counts.samples.withLock { $0 }
            let total = counts.reads.load(ordering: .relaxed)
            // The second half: from the sample nearest the middle to the last.
            let middle = all.min { abs($0.seconds - seconds / 2) < abs($1.seconds - seconds / 2) } ?? all[0]
            let last = all.last ?? all[0]
            let minutes = max(1e-9, (last.seconds - middle.seconds) / 60)
            let grown = last.rssMB - middle.rssMB
            let readsInHalf = max(1, last.reads - middle.reads)
            return Result(
                storage: description, seconds: (seconds * 10).rounded() / 10, reads: total, readsPerSecond: (Double(total) / seconds).rounded(),
                failures: counts.failures.load(ordering: .relaxed), rssBeforeMB: before,
                rssAfterFirstMinuteMB: all.first { $0.seconds >= 60 }?.rssMB, rssEndMB: last.rssMB, rssMaxMB: all.map(\.rssMB).max() ?? before,
                growthMBPerMinuteSecondHalf: (grown / minutes * 100).rounded() / 100,
                bytesPerReadSecondHalf: (grown * 1_048_576 / Double(readsInHalf) * 10).rounded() / 10,
                connectionCheckouts: (store as? PostgresLedgerStore).map { $0.connectionCheckouts - (checkoutsBefore ?? 0) },
                samples: all
            )
        }
    }
}
