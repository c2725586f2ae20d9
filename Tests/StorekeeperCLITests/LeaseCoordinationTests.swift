import AppStoreSimulator
import Foundation
import Glibc
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// `serve`, `recover` and `reconcile --all` on one ledger coordinate through the ledger's job leases, on SQLite as
/// on PostgreSQL; Ctrl-C gives a lease back and says what was done.
@Suite("storekeeper recover and reconcile: leases and interruptions")
struct LeaseCoordinationTests {
    @Test(
        "SQLite: concurrent reconcile --all runs never overlap, recover waits for no server's job, Ctrl-C gives the lease back and prints what was done"
    )
    func sqlite() async throws {
        let directory = try CLI.temporaryDirectory("leases-sqlite")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(48, in: directory)
        _ = try SQLiteLedgerStore(path: missed.database)  // the ledger, as `serve` creates it
        try await Self.exercise(missed, database: missed.database, in: directory)
    }

    @Test(
        "PostgreSQL: the same, on one database",
        .needsPostgres
    )
    func postgres() async throws {
        let directory = try CLI.temporaryDirectory("leases-postgres")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(48, in: directory)
        let database = try await PostgresInstancesTests.newDatabase()
        try await PostgresInstancesTests.droppingAfterwards(database) {
            try await Self.exercise(missed, database: database, in: directory)
        }
    }

    static func exercise(_ missed: MissedNotifications, database: String, in directory: URL) async throws {
        try await missed.serve { _ in
            let filled = try await CLI.runDetached(["recover", "--config", missed.config, "--database", database])
            #expect(filled.status == 0, "\(filled.stderr)")

            // Three at once: one runs, the others are refused at once, naming the holder.
            let runs = try await withThrowingTaskGroup(of: CLI.Output.self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        try await CLI.runDetached(["reconcile", "--config", missed.config, "--database", database, "--all", "--dry-run"])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(runs.filter { $0.status == 0 }.count == 1, "\(runs.map(\.stderr))")
            for refused in runs where refused.status != 0 {
                #expect(
                    refused.stderr.contains("error: com.example.storekeeper (Sandbox): job-running: another `storekeeper reconcile --all`"),
                    "\(refused.stderr)")
                #expect(
                    refused.stderr.contains("/\(ProcessInfo.processInfo.hostName)") || refused.stderr.contains("running on this ledger ("),
                    "names the holder: \(refused.stderr)")
            }

            // Ctrl-C midway: exit 130, the report of what was done, the progress line ended, the lease given back.
            let interrupted = try RunningCommand(["reconcile", "--config", missed.config, "--database", database, "--all"], in: directory)
            #expect(try await interrupted.waitFor("purchases/s"), "\(interrupted.stderr)")
            interrupted.signal(SIGINT)
            #expect(try await interrupted.finish() == 130, "\(interrupted.stderr)")
            try #require(!interrupted.stdout.isEmpty, "no report: \(interrupted.stderr)")
            let report = try CLI.json(interrupted.stdout)
            #expect(report["complete"] as? Bool == false, "\(interrupted.stdout)")
            #expect((report["checked"] as? Int ?? 0) < (report["purchases"] as? Int ?? 0), "\(interrupted.stdout)")
            #expect(interrupted.stderr.contains("reconcile stopped after") && interrupted.stderr.contains("interrupted"), "\(interrupted.stderr)")
            #expect(interrupted.stderr.hasSuffix("\n"), "the line is ended: \(interrupted.stderr.suffix(200))")
            let next = try await CLI.runDetached(["reconcile", "--config", missed.config, "--database", database, "--all", "--dry-run"])
            #expect(next.status == 0, "the lease was given back: \(next.stderr)")

            // A server running the recovery job holds its lease: `recover` says so instead of calling Apple beside it.
            let server = try RunningCommand(["serve", "--config", missed.config, "--database", database, "--port", "0"], in: directory)
            defer { server.stop() }
            _ = try await server.port()
            #expect(try await server.waitFor("job lease taken"), "\(server.stderr)")
            let recover = try await CLI.runDetached(["recover", "--config", missed.config, "--database", database])
            #expect(recover.status == 1, "\(recover.stdout)")
            #expect(
                recover.stderr.contains(
                    "job-running: a server on this ledger runs com.example.storekeeper (Sandbox)'s notification recovery job (")
                    && recover.stderr.contains("/\(server.process.processIdentifier)/"), "\(recover.stderr)")
            // A dry run changes nothing: it looks beside the server's job, more slowly, and says so.
            let look = try await CLI.runDetached(["recover", "--config", missed.config, "--database", database, "--dry-run"])
            #expect(look.status == 0 && look.stderr.contains("this dry run reads beside it"), "\(look.stderr)")
            #expect(try CLI.json(look.stdout)["missingCount"] as? Int == 0, "\(look.stdout)")
            // A dry run beside the server that cannot cover its window (older than the App Store's history) fails as a
            // real run does.
            let appStoreNow = try await missed.simulator.read { $0.state.now }
            let tooOld = appStoreNow.addingTimeInterval(-60 * 86_400).formatted(.iso8601)
            let lost = try await CLI.runDetached(["recover", "--config", missed.config, "--database", database, "--dry-run", "--since", tooOld])
            #expect(
                lost.status == 1 && lost.stderr.contains("this dry run reads beside it") && lost.stderr.contains("could not cover its window"),
                "\(lost.stderr)")
            // Killed, its lease is not waited out: the holder's process is gone.
            server.stop()
            let after = try await CLI.runDetached(["recover", "--config", missed.config, "--database", database])
            #expect(after.status == 0, "\(after.stderr)")
        }
    }
}
