import AppStoreModels
package import Foundation
import PostgresNIO
package import StorekeeperCore

/// Deliveries on PostgreSQL, shared by every instance: an endpoint's fan-out holds its row's lock, and a claim takes
/// rows with `FOR UPDATE SKIP LOCKED`, so two instances never claim one delivery, and never a customer's later event
/// while an earlier one is pending. A claim's lease is kept by the database's clock, as the jobs' are: instances whose
/// clocks differ never take a delivery another is still sending.
extension PostgresLedgerStore {
    /// The database's clock, in epoch milliseconds (SQL).
    static let databaseMilliseconds = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

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
            if !matching.isEmpty { try await Self.insertDeliveries(connection, endpoint: route.name, events: matching, now: now, again: false) }
            try await connection.execute("UPDATE webhook_endpoints SET cursor = \(last.position) WHERE name = \(route.name)")
            return (events.count, [])
        }
    }

    /// Pending deliveries of `events`, as the SQLite store's `insertDelivery(_:endpoint:event:now:again:)` makes
    /// them: `again` resets existing ones not held by an instance now; a fan-out leaves existing ones as they are. An
    /// event deleted since it was read (an erasure, the retention) gets none.
    static func insertDeliveries(_ connection: PostgresConnection, endpoint: String, events: [LedgerEvent], now: Date, again: Bool) async throws {
        let conflict =
            again
            ? """
            DO UPDATE SET status = 'pending', next_attempt_at = excluded.next_attempt_at, attempts = 0, claimed_by = NULL,
                claimed_until = NULL, finished_at = NULL
            WHERE deliveries.claimed_until IS NULL OR deliveries.claimed_until < \(databaseMilliseconds)
            """ : "DO NOTHING"
        try await connection.execute(
            """
            INSERT INTO deliveries (endpoint, position, bundle_id, environment, customer_id, sequence, status, next_attempt_at, created_at)
            SELECT \(endpoint), p, b, e, c, s, 'pending', \(now.epochMilliseconds), \(now.epochMilliseconds)
            FROM unnest(\(events.map(\.position))::bigint[], \(events.map(\.customer.bundleId))::text[],
                \(events.map(\.customer.environment.rawValue))::text[], \(events.map(\.customer.customerId))::text[],
                \(events.map(\.draft.sequence))::bigint[]) AS x(p, b, e, c, s)
            WHERE EXISTS (SELECT 1 FROM events WHERE events.position = x.p)
            ON CONFLICT (endpoint, position) \(unescaped: conflict)
            """)
    }

    package func claimDeliveries(
        endpoint: String, holder: String, limit: Int, now: Date, lease: Duration
    ) async throws(StorageError) -> [ClaimedDelivery] {
        let leaseMilliseconds = Int64(lease / .milliseconds(1))
        let at = now.epochMilliseconds
        return try await write { transaction in
            let connection = transaction.connection
            var attempts: [Int64: Int] = [:]
            let rows = try await connection.run(
                """
                WITH c AS (
                    SELECT d.endpoint, d.position FROM deliveries d
                    WHERE d.endpoint = \(endpoint) AND d.status = 'pending' AND d.next_attempt_at <= \(at)
                    AND (d.claimed_until IS NULL OR d.claimed_until < \(unescaped: Self.databaseMilliseconds))
                    AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.endpoint = d.endpoint AND e.status = 'pending'
                        AND e.bundle_id = d.bundle_id AND e.environment = d.environment AND e.customer_id = d.customer_id AND e.sequence < d.sequence)
                    ORDER BY d.position LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED)
                UPDATE deliveries d SET claimed_by = \(holder), claimed_until = \(unescaped: Self.databaseMilliseconds) + \(leaseMilliseconds) FROM c
                WHERE d.endpoint = c.endpoint AND d.position = c.position RETURNING d.position, d.attempts
                """)
            for try await (position, count) in rows.decode((Int64, Int32).self) { attempts[position] = Int(count) }
            guard !attempts.isEmpty else { return ([], []) }
            let events = try await Self.events(
                connection.run(
                    "SELECT \(unescaped: Self.eventColumns) FROM events WHERE position = ANY(\(Array(attempts.keys))::bigint[]) ORDER BY position"))
            // A delivery whose event is gone (an erasure or the retention deleted it after the fan-out read it): nothing
            // to send, and left pending it would hold back every later event of its customer.
            let gone = Set(attempts.keys).subtracting(events.map(\.position))
            if !gone.isEmpty {
                try await connection.execute(
                    """
                    UPDATE deliveries SET status = 'dead', finished_at = \(at), claimed_by = NULL, claimed_until = NULL
                    WHERE endpoint = \(endpoint) AND position = ANY(\(gone.sorted())::bigint[])
                    """)
            }
            return (events.map { ClaimedDelivery(event: $0, attempts: attempts[$0.position] ?? 0) }, [])
        }
    }

    package func finishAttempts(endpoint: String, holder: String, _ attempts: [FinishedAttempt]) async throws(StorageError) {
        guard !attempts.isEmpty else { return }
        let now = Date().epochMilliseconds
        // What becomes of each delivery: status, and when it is tried next.
        let statuses = attempts.map { finished -> String in
            switch finished.outcome {
            case .delivered: "delivered"
            case .retry: "pending"
            case .deadLettered: "dead"
            }
        }
        let next = attempts.map { finished -> Int64 in if case .retry(let at) = finished.outcome { at.epochMilliseconds } else { now } }
        let dead = attempts.first { $0.outcome == .deadLettered }
        let delivered = attempts.contains { $0.outcome == .delivered }
        try await write { transaction in
            let connection = transaction.connection
            try await connection.execute(
                """
                INSERT INTO delivery_attempts (endpoint, position, attempted_at, status_code, latency_ms, error, response_excerpt)
                SELECT \(endpoint), p, a, NULLIF(c, -1), l, NULLIF(e, ''), NULLIF(x, '') FROM unnest(
                    \(attempts.map(\.position))::bigint[], \(attempts.map(\.attempt.attemptedAt.epochMilliseconds))::bigint[],
                    \(attempts.map { Int32($0.attempt.statusCode ?? -1) })::integer[], \(attempts.map(\.attempt.latencyMilliseconds))::bigint[],
                    \(attempts.map { $0.attempt.error ?? "" })::text[], \(attempts.map { $0.attempt.responseExcerpt ?? "" })::text[]) AS t(p, a, c, l, e, x)
                """)
            try await connection.execute(
                """
                UPDATE deliveries d SET status = u.s, attempts = d.attempts + 1, next_attempt_at = u.n,
                    finished_at = CASE WHEN u.s = 'pending' THEN NULL ELSE \(now)::bigint END, claimed_by = NULL, claimed_until = NULL
                FROM unnest(\(attempts.map(\.position))::bigint[], \(statuses)::text[], \(next)::bigint[]) AS u(p, s, n)
                WHERE d.endpoint = \(endpoint) AND d.position = u.p AND d.claimed_by = \(holder) AND d.status = 'pending'
                """)
            if let dead {
                try await connection.execute(
                    """
                    UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, \(now)),
                        failing_reason = \(dead.attempt.error ?? "HTTP \(dead.attempt.statusCode ?? 0)") WHERE name = \(endpoint)
                    """)
            }
            if delivered {
                try await connection.execute("UPDATE webhook_endpoints SET failing_since = NULL, failing_reason = NULL WHERE name = \(endpoint)")
            }
            return ((), [])
        }
    }

    package func releaseClaims(endpoint: String, holder: String, positions: [Int64]) async throws(StorageError) {
        guard !positions.isEmpty else { return }
        try await write { transaction in
            try await transaction.connection.execute(
                """
                UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL
                WHERE endpoint = \(endpoint) AND position = ANY(\(positions)::bigint[]) AND claimed_by = \(holder) AND status = 'pending'
                """)
            return ((), [])
        }
    }

    package func endpointStatus(_ route: WebhookRoute) async throws(StorageError) -> EndpointStatus {
        let endpoint = route.name
        let (bundleIds, environments, types) = (
            route.bundleIds.map { Array($0).sorted() }, route.environments.map { $0.map(\.rawValue).sorted() },
            route.types.map { $0.map(\.rawValue).sorted() }
        )
        return try await read { connection in
            var status = EndpointStatus(name: endpoint, backlog: 0, oldestPending: nil, deadLettered: 0, failingSince: nil, failingReason: nil)
            for try await (pending, oldest, dead) in try await connection.run(
                """
                SELECT count(*) FILTER (WHERE d.status = 'pending'), min(coalesce(e.occurred_at, d.created_at)) FILTER (WHERE d.status = 'pending'),
                    count(*) FILTER (WHERE d.status = 'dead')
                FROM deliveries d LEFT JOIN events e ON e.position = d.position WHERE d.endpoint = \(endpoint)
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
            // The events committed after the fan-out's cursor that the route matches.
            for try await (waiting, oldest) in try await connection.run(
                """
                SELECT count(*), min(occurred_at) FROM events
                WHERE position > coalesce((SELECT cursor FROM webhook_endpoints WHERE name = \(endpoint)), 9223372036854775807)
                AND (\(bundleIds == nil) OR bundle_id = ANY(\(bundleIds ?? [])::text[]))
                AND (\(environments == nil) OR environment = ANY(\(environments ?? [])::text[]))
                AND (\(types == nil) OR type = ANY(\(types ?? [])::text[]))
                """
            ).decode((Int64, Int64?).self) {
                status.notHandedOver = Int(waiting)
                status.backlog += Int(waiting)
                if let oldest { status.oldestPending = min(status.oldestPending ?? .distantFuture, Date(epochMilliseconds: oldest)) }
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
        // The delivery loops of this process look again at once (they wait for a commit or their next look).
        eventsAppended.signal()
    }

    package func enqueue(_ events: [LedgerEvent], endpoint: String, now: Date) async throws(StorageError) {
        guard !events.isEmpty else { return }
        try await write { transaction in
            try await Self.insertDeliveries(transaction.connection, endpoint: endpoint, events: events, now: now, again: true)
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
