import Foundation
import PostgresNIO
package import StorekeeperCore

/// Job leases (`job_leases`): which instance runs each scheduled job, judged by the database's clock.
extension PostgresLedgerStore {
    /// The lease row is taken when free or lapsed by the database's clock (`clock_timestamp()`), so instances whose
    /// clocks disagree still agree on who holds it.
    package func acquireLease(_ job: String, holder: String, duration: Duration) async throws(StorageError) -> Bool {
        let milliseconds = duration.components.seconds * 1_000 + duration.components.attoseconds / 1_000_000_000_000_000
        return try await read { connection in
            var held = false
            for try await _ in try await connection.run(
                """
                INSERT INTO job_leases (name, holder, expires_at) VALUES (\(job), \(holder), clock_timestamp() + \(milliseconds) * interval '1 millisecond')
                ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
                WHERE job_leases.holder = excluded.holder OR job_leases.expires_at < clock_timestamp()
                RETURNING 1
                """
            ).decode(Int.self) { held = true }
            return held
        }
    }

    /// Who holds a job's lease now (`nil` when nobody does, or the lease has lapsed), by the database's clock.
    package func leaseHolder(_ job: String) async throws(StorageError) -> String? {
        try await read { connection in
            var holder: String? = nil
            for try await name in try await connection.run(
                "SELECT holder FROM job_leases WHERE name = \(job) AND expires_at >= clock_timestamp()"
            ).decode(String.self) { holder = name }
            return holder
        }
    }

    package func releaseLease(_ job: String, holder: String) async throws(StorageError) {
        try await read { connection in
            try await connection.execute("DELETE FROM job_leases WHERE name = \(job) AND holder = \(holder)")
        }
    }
}
