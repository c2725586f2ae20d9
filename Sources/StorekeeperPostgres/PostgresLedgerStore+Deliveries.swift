import AppStoreModels
package import Foundation
import PostgresNIO
package import StorekeeperCore

/// Deliveries on PostgreSQL, shared by every instance: an endpoint's fan-out holds its row's lock, and a claim takes
/// rows with `FOR UPDATE SKIP LOCKED`, so two instances never claim one delivery, and never a customer's later event
/// while an earlier one is pending.
extension PostgresLedgerStore {
    package func fanOut(_ route: WebhookRoute, limit: Int, now: Date) async throws(StorageError) -> Int {
        try await write { transaction in
            let connection = transaction.connection
            var inserted = false
            for try await _ in try await connection.run(
                """
                INSERT INTO webhook_endpoints (name, cursor) SELECT \(route.name), last FROM outbox_position WHERE id = 1
                ON CONFLICT (name) DO NOTHING RETURNING 1
                """
            ) { inserted = true }
            if inserted { return (0, []) }
            var cursor: Int64 = 0
            for try await value in try await connection.run("SELECT cursor FROM webhook_endpoints WHERE name = \(route.name) FOR UPDATE").decode(
                Int64.self)
            {
                cursor = value
            }
            let events = try await Self.events(
                connection.run(
                    "SELECT \(unescaped: Self.eventColumns) FROM events WHERE position > \(cursor) ORDER BY position LIMIT \(Int64(limit))"))
            guard let last = events.last else { return (0, []) }
            let matching = events.filter(route.matches)
            if !matching.isEmpty { try await Self.insertDeliveries(connection, endpoint: route.name, events: matching, now: now) }
            try await connection.execute("UPDATE webhook_endpoints SET cursor = \(last.position) WHERE name = \(route.name)")
            return (matching.count, [])
        }
    }

    static func insertDeliveries(_ connection: PostgresConnection, endpoint: String, events: [LedgerEvent], now: Date) async throws {
        try await connection.execute(
            """
            INSERT INTO deliveries (endpoint, position, bundle_id, environment, customer_id, sequence, status, next_attempt_at, created_at)
            SELECT \(endpoint), p, b, e, c, s, 'pending', \(now.epochMilliseconds), \(now.epochMilliseconds)
            FROM unnest(\(events.map(\.position))::bigint[], \(events.map(\.customer.bundleId))::text[],
                \(events.map(\.customer.environment.rawValue))::text[], \(events.map(\.customer.customerId))::text[],
                \(events.map(\.draft.sequence))::bigint[]) AS x(p, b, e, c, s)
            ON CONFLICT (endpoint, position) DO UPDATE SET status = 'pending', next_attempt_at = excluded.next_attempt_at,
                claimed_by = NULL, claimed_until = NULL, finished_at = NULL
            """)
    }

    package func claimDeliveries(
        endpoint: String, holder: String, limit: Int, now: Date, lease: Duration
    ) async throws(StorageError) -> [ClaimedDelivery] {
        let until = now.epochMilliseconds + Int64(lease / .milliseconds(1))
        let at = now.epochMilliseconds
        return try await write { transaction in
            let connection = transaction.connection
            var attempts: [Int64: Int] = [:]
            let rows = try await connection.run(
                """
                WITH c AS (
                    SELECT d.endpoint, d.position FROM deliveries d
                    WHERE d.endpoint = \(endpoint) AND d.status = 'pending' AND d.next_attempt_at <= \(at)
                    AND (d.claimed_until IS NULL OR d.claimed_until < \(at))
                    AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.endpoint = d.endpoint AND e.status = 'pending'
                        AND e.bundle_id = d.bundle_id AND e.environment = d.environment AND e.customer_id = d.customer_id AND e.sequence < d.sequence)
                    ORDER BY d.position LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED)
                UPDATE deliveries d SET claimed_by = \(holder), claimed_until = \(until) FROM c
                WHERE d.endpoint = c.endpoint AND d.position = c.position RETURNING d.position, d.attempts
                """)
            for try await (position, count) in rows.decode((Int64, Int32).self) { attempts[position] = Int(count) }
            guard !attempts.isEmpty else { return ([], []) }
            let events = try await Self.events(
                connection.run(
                    "SELECT \(unescaped: Self.eventColumns) FROM events WHERE position = ANY(\(Array(attempts.keys))::bigint[]) ORDER BY position"))
            return (events.map { ClaimedDelivery(event: $0, attempts: attempts[$0.position] ?? 0) }, [])
        }
    }

    package func finishAttempt(
        endpoint: String, position: Int64, holder: String, attempt: DeliveryAttempt, outcome: DeliveryOutcome
    ) async throws(StorageError) {
        try await write { transaction in
            let connection = transaction.connection
            try await connection.execute(
                """
                INSERT INTO delivery_attempts (endpoint, position, attempted_at, status_code, latency_ms, error, response_excerpt)
                VALUES (\(endpoint), \(position), \(attempt.attemptedAt.epochMilliseconds), \(attempt.statusCode.map(Int32.init)),
                    \(attempt.latencyMilliseconds), \(attempt.error), \(attempt.responseExcerpt))
                """)
            let now = Date().epochMilliseconds
            switch outcome {
            case .delivered:
                try await connection.execute(
                    """
                    UPDATE deliveries SET status = 'delivered', attempts = attempts + 1, finished_at = \(now), claimed_by = NULL, claimed_until = NULL
                    WHERE endpoint = \(endpoint) AND position = \(position) AND claimed_by = \(holder) AND status = 'pending'
                    """)
                try await connection.execute("UPDATE webhook_endpoints SET failing_since = NULL, failing_reason = NULL WHERE name = \(endpoint)")
            case .retry(let at):
                try await connection.execute(
                    """
                    UPDATE deliveries SET attempts = attempts + 1, next_attempt_at = \(at.epochMilliseconds), claimed_by = NULL, claimed_until = NULL
                    WHERE endpoint = \(endpoint) AND position = \(position) AND claimed_by = \(holder) AND status = 'pending'
                    """)
            case .deadLettered:
                try await connection.execute(
                    """
                    UPDATE deliveries SET status = 'dead', attempts = attempts + 1, finished_at = \(now), claimed_by = NULL, claimed_until = NULL
                    WHERE endpoint = \(endpoint) AND position = \(position) AND claimed_by = \(holder) AND status = 'pending'
                    """)
                try await connection.execute(
                    """
                    UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, \(now)), failing_reason = \(attempt.error ?? "HTTP \(attempt.statusCode ?? 0)")
                    WHERE name = \(endpoint)
                    """)
            }
            return ((), [])
        }
    }

    package func endpointStatus(_ endpoint: String) async throws(StorageError) -> EndpointStatus {
        try await read { connection in
            var status = EndpointStatus(name: endpoint, backlog: 0, oldestPending: nil, deadLettered: 0, failingSince: nil, failingReason: nil)
            for try await (pending, oldest, dead) in try await connection.run(
                """
                SELECT count(*) FILTER (WHERE status = 'pending'), min(created_at) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead')
                FROM deliveries WHERE endpoint = \(endpoint)
                """
            ).decode((Int64, Int64?, Int64).self) {
                status.backlog = Int(pending)
                status.oldestPending = oldest.map(Date.init(epochMilliseconds:))
                status.deadLettered = Int(dead)
            }
            for try await (since, reason) in try await connection.run(
                "SELECT failing_since, failing_reason FROM webhook_endpoints WHERE name = \(endpoint)"
            ).decode((Int64?, String?).self) {
                status.failingSince = since.map(Date.init(epochMilliseconds:))
                status.failingReason = reason
            }
            return status
        }
    }

    package func resumeEndpoint(_ endpoint: String, now: Date) async throws(StorageError) {
        try await write { transaction in
            try await transaction.connection.execute(
                "UPDATE webhook_endpoints SET failing_since = NULL, failing_reason = NULL WHERE name = \(endpoint)")
            try await transaction.connection.execute(
                "UPDATE deliveries SET next_attempt_at = \(now.epochMilliseconds) WHERE endpoint = \(endpoint) AND status = 'pending'")
            return ((), [])
        }
    }

    package func enqueue(_ events: [LedgerEvent], endpoint: String, now: Date) async throws(StorageError) {
        guard !events.isEmpty else { return }
        try await write { transaction in
            try await Self.insertDeliveries(transaction.connection, endpoint: endpoint, events: events, now: now)
            return ((), [])
        }
    }

    package func deliveries(of position: Int64) async throws(StorageError) -> [DeliveryRecord] {
        try await read { connection in
            var records: [DeliveryRecord] = []
            for try await (endpoint, status, attempts, next, finished) in try await connection.run(
                "SELECT endpoint, status, attempts, next_attempt_at, finished_at FROM deliveries WHERE position = \(position) ORDER BY endpoint"
            ).decode((String, String, Int32, Int64, Int64?).self) {
                records.append(
                    DeliveryRecord(
                        endpoint: endpoint, status: status, attempts: Int(attempts),
                        nextAttemptAt: status == "pending" ? Date(epochMilliseconds: next) : nil,
                        finishedAt: finished.map(Date.init(epochMilliseconds:)), history: []))
            }
            for index in records.indices {
                for try await (at, code, latency, error, excerpt) in try await connection.run(
                    """
                    SELECT attempted_at, status_code, latency_ms, error, response_excerpt FROM delivery_attempts
                    WHERE endpoint = \(records[index].endpoint) AND position = \(position) ORDER BY id
                    """
                ).decode((Int64, Int32?, Int64, String?, String?).self) {
                    records[index].history.append(
                        DeliveryAttempt(
                            attemptedAt: Date(epochMilliseconds: at), statusCode: code.map(Int.init), latencyMilliseconds: latency, error: error,
                            responseExcerpt: excerpt))
                }
            }
            return records
        }
    }
}
