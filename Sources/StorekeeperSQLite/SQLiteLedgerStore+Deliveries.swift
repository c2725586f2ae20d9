import AppStoreModels
package import Foundation
import GRDB
package import StorekeeperCore

/// Deliveries on SQLite: one writer at a time, so a claim is a plain `UPDATE` in a write transaction.
extension SQLiteLedgerStore {
    package func fanOut(_ route: WebhookRoute, limit: Int, now: Date) async throws(StorageError) -> Int {
        try await write { db, _ in
            let cursor: Int64
            if let known = try Int64.fetchOne(db, sql: "SELECT cursor FROM webhook_endpoints WHERE name = ?", arguments: [route.name]) {
                cursor = known
            } else {
                cursor = try Int64.fetchOne(db, sql: "SELECT coalesce(max(position), 0) FROM events") ?? 0
                try db.execute(sql: "INSERT INTO webhook_endpoints (name, cursor) VALUES (?, ?)", arguments: [route.name, cursor])
                return 0
            }
            let events = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT \(Self.eventColumns) FROM events WHERE position > ? ORDER BY position LIMIT ?"),
                arguments: [cursor, limit]
            ).compactMap(Self.event)
            guard let last = events.last else { return 0 }
            for event in events where route.matches(event) {
                try Self.insertDelivery(db, endpoint: route.name, event: event, now: now, again: false)
            }
            try db.execute(sql: "UPDATE webhook_endpoints SET cursor = ? WHERE name = ?", arguments: [last.position, route.name])
            return events.count
        }
    }

    /// A pending delivery of `event`. `again` (a redelivery or a replay): a delivery that exists is made pending again,
    /// to be tried at once, unless an instance holds it now (it is being sent: resetting it would send it a second
    /// time alongside, and lose the first attempt's outcome). A fan-out never touches one that exists (a replay that
    /// ran ahead of the endpoint's cursor made it, and may have delivered it since). An event deleted since it was read
    /// (an erasure, the retention) gets none.
    static func insertDelivery(_ db: Database, endpoint: String, event: LedgerEvent, now: Date, again: Bool) throws {
        try db.cachedStatement(
            sql: again
                ? """
                INSERT INTO deliveries (endpoint, position, bundle_id, environment, customer_id, sequence, status, next_attempt_at, created_at)
                SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?8 WHERE EXISTS (SELECT 1 FROM events WHERE position = ?2)
                ON CONFLICT (endpoint, position) DO UPDATE SET status = 'pending', next_attempt_at = excluded.next_attempt_at,
                    attempts = 0, claimed_by = NULL, claimed_until = NULL, finished_at = NULL
                WHERE deliveries.claimed_until IS NULL OR deliveries.claimed_until < excluded.next_attempt_at
                """
                : """
                INSERT INTO deliveries (endpoint, position, bundle_id, environment, customer_id, sequence, status, next_attempt_at, created_at)
                VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?)
                ON CONFLICT (endpoint, position) DO NOTHING
                """
        ).execute(arguments: [
            endpoint, event.position, event.customer.bundleId, event.customer.environment.rawValue, event.customer.customerId,
            event.draft.sequence, now.epochMilliseconds, now.epochMilliseconds,
        ])
    }

    package func claimDeliveries(
        endpoint: String, holder: String, limit: Int, now: Date, lease: Duration
    ) async throws(StorageError) -> [ClaimedDelivery] {
        let until = now.epochMilliseconds + Int64(lease / .milliseconds(1))
        return try await write { db, _ in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT d.position, d.attempts FROM deliveries d
                    WHERE d.endpoint = ?1 AND d.status = 'pending' AND d.next_attempt_at <= ?2 AND (d.claimed_until IS NULL OR d.claimed_until < ?2)
                    AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.endpoint = d.endpoint AND e.status = 'pending'
                        AND e.bundle_id = d.bundle_id AND e.environment = d.environment AND e.customer_id = d.customer_id AND e.sequence < d.sequence)
                    ORDER BY d.position LIMIT ?3
                    """, arguments: [endpoint, now.epochMilliseconds, limit])
            var claimed: [ClaimedDelivery] = []
            for row in rows {
                let position: Int64 = row["position"]
                try db.execute(
                    sql: "UPDATE deliveries SET claimed_by = ?, claimed_until = ? WHERE endpoint = ? AND position = ?",
                    arguments: [holder, until, endpoint, position])
                guard
                    let event = try Row.fetchOne(db, sql: "SELECT \(Self.eventColumns) FROM events WHERE position = ?", arguments: [position])
                        .flatMap(Self.event)
                else {
                    // Its event is gone (pruned by hand): nothing to send.
                    try db.execute(
                        sql: "UPDATE deliveries SET status = 'dead', finished_at = ? WHERE endpoint = ? AND position = ?",
                        arguments: [now.epochMilliseconds, endpoint, position])
                    continue
                }
                claimed.append(ClaimedDelivery(event: event, attempts: row["attempts"]))
            }
            return claimed
        }
    }

    package func finishAttempts(endpoint: String, holder: String, _ attempts: [FinishedAttempt]) async throws(StorageError) {
        guard !attempts.isEmpty else { return }
        try await write { db, _ in
            let now = Date().epochMilliseconds
            let mine = "endpoint = ? AND position = ? AND claimed_by = ? AND status = 'pending'"
            for finished in attempts {
                let (position, attempt) = (finished.position, finished.attempt)
                try db.cachedStatement(
                    sql: """
                        INSERT INTO delivery_attempts (endpoint, position, attempted_at, status_code, latency_ms, error, response_excerpt)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """
                ).execute(arguments: [
                    endpoint, position, attempt.attemptedAt.epochMilliseconds, attempt.statusCode, attempt.latencyMilliseconds, attempt.error,
                    attempt.responseExcerpt,
                ])
                switch finished.outcome {
                case .delivered:
                    try db.cachedStatement(
                        sql:
                            "UPDATE deliveries SET status = 'delivered', attempts = attempts + 1, finished_at = ?, claimed_by = NULL, claimed_until = NULL WHERE \(mine)"
                    ).execute(arguments: [now, endpoint, position, holder])
                case .retry(let at):
                    try db.cachedStatement(
                        sql:
                            "UPDATE deliveries SET attempts = attempts + 1, next_attempt_at = ?, claimed_by = NULL, claimed_until = NULL WHERE \(mine)"
                    ).execute(arguments: [at.epochMilliseconds, endpoint, position, holder])
                case .deadLettered:
                    try db.cachedStatement(
                        sql:
                            "UPDATE deliveries SET status = 'dead', attempts = attempts + 1, finished_at = ?, claimed_by = NULL, claimed_until = NULL WHERE \(mine)"
                    ).execute(arguments: [now, endpoint, position, holder])
                    try db.execute(
                        sql: "UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, ?), failing_reason = ? WHERE name = ?",
                        arguments: [now, attempt.error ?? "HTTP \(attempt.statusCode ?? 0)", endpoint])
                }
            }
            // A success clears the failing mark, after any dead letter of the same batch.
            if attempts.contains(where: { $0.outcome == .delivered }) {
                try db.execute(sql: "UPDATE webhook_endpoints SET failing_since = NULL, failing_reason = NULL WHERE name = ?", arguments: [endpoint])
            }
        }
    }

    package func releaseClaims(endpoint: String, holder: String, positions: [Int64]) async throws(StorageError) {
        guard !positions.isEmpty else { return }
        try await write { db, _ in
            for position in positions {
                try db.execute(
                    sql: """
                        UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL
                        WHERE endpoint = ? AND position = ? AND claimed_by = ? AND status = 'pending'
                        """, arguments: [endpoint, position, holder])
            }
        }
    }

    package func endpointStatus(_ route: WebhookRoute) async throws(StorageError) -> EndpointStatus {
        let endpoint = route.name
        return try await read { db in
            let pending = try Row.fetchOne(
                db,
                // The age of the oldest event waiting, not of its delivery (made again by a hand-over or a redelivery).
                sql: """
                    SELECT count(*) AS n, min(coalesce(e.occurred_at, d.created_at)) AS oldest
                    FROM deliveries d LEFT JOIN events e ON e.position = d.position WHERE d.endpoint = ? AND d.status = 'pending'
                    """, arguments: [endpoint])
            let dead = try Int.fetchOne(db, sql: "SELECT count(*) FROM deliveries WHERE endpoint = ? AND status = 'dead'", arguments: [endpoint]) ?? 0
            let mark = try Row.fetchOne(db, sql: "SELECT failing_since, failing_reason FROM webhook_endpoints WHERE name = ?", arguments: [endpoint])
            // The events committed after the fan-out's cursor that the route matches.
            var conditions = ["position > coalesce((SELECT cursor FROM webhook_endpoints WHERE name = ?), 9223372036854775807)"]
            var arguments: StatementArguments = [endpoint]
            Self.whereIn("bundle_id", route.bundleIds.map(Array.init), &conditions, &arguments)
            Self.whereIn("environment", route.environments.map { $0.map(\.rawValue) }, &conditions, &arguments)
            Self.whereIn("type", route.types.map { $0.map(\.rawValue) }, &conditions, &arguments)
            let waiting = try Row.fetchOne(
                db, sql: "SELECT count(*) AS n, min(occurred_at) AS oldest FROM events WHERE \(conditions.joined(separator: " AND "))",
                arguments: arguments)
            let notHandedOver: Int = waiting?["n"] ?? 0
            let oldest = [pending?["oldest"] as Int64?, waiting?["oldest"] as Int64?].compactMap { $0 }.min()
            return EndpointStatus(
                name: endpoint, backlog: (pending?["n"] ?? 0) + notHandedOver, oldestPending: oldest.map(Date.init(epochMilliseconds:)),
                deadLettered: dead, failingSince: (mark?["failing_since"] as Int64?).map(Date.init(epochMilliseconds:)),
                failingReason: mark?["failing_reason"], notHandedOver: notHandedOver)
        }
    }

    package func resumeEndpoint(_ endpoint: String, now: Date) async throws(StorageError) {
        try await write { db, _ in
            try db.execute(sql: "UPDATE webhook_endpoints SET failing_since = NULL, failing_reason = NULL WHERE name = ?", arguments: [endpoint])
            try db.execute(
                sql: "UPDATE deliveries SET next_attempt_at = ? WHERE endpoint = ? AND status = 'pending'",
                arguments: [now.epochMilliseconds, endpoint])
        }
        // The delivery loops of this process look again at once (they wait for a commit or their next look).
        eventsAppended.signal()
    }

    package func enqueue(_ events: [LedgerEvent], endpoint: String, now: Date) async throws(StorageError) {
        try await write { db, _ in
            for event in events { try Self.insertDelivery(db, endpoint: endpoint, event: event, now: now, again: true) }
        }
    }

    package func deliveries(of position: Int64) async throws(StorageError) -> [DeliveryRecord] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT endpoint, status, attempts, next_attempt_at, finished_at FROM deliveries WHERE position = ? ORDER BY endpoint",
                arguments: [position]
            ).map { row in
                let endpoint: String = row["endpoint"]
                let history = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT attempted_at, status_code, latency_ms, error, response_excerpt FROM delivery_attempts
                        WHERE endpoint = ? AND position = ? ORDER BY id
                        """, arguments: [endpoint, position]
                ).map { attempt in
                    DeliveryAttempt(
                        attemptedAt: Date(epochMilliseconds: attempt["attempted_at"]), statusCode: attempt["status_code"],
                        latencyMilliseconds: attempt["latency_ms"], error: attempt["error"], responseExcerpt: attempt["response_excerpt"])
                }
                let status: String = row["status"]
                return DeliveryRecord(
                    endpoint: endpoint, status: status, attempts: row["attempts"],
                    nextAttemptAt: status == "pending" ? Date(epochMilliseconds: row["next_attempt_at"]) : nil,
                    finishedAt: (row["finished_at"] as Int64?).map(Date.init(epochMilliseconds:)), history: history)
            }
        }
    }
}
