import AppStoreModels
import Foundation
import PostgresNIO
package import StorekeeperCore

/// A ledger copied in (``LedgerImporting``), page by page, each page in one transaction.
extension PostgresLedgerStore: LedgerImporting {
    package func isEmpty() async throws(StorageError) -> Bool {
        try await read { connection in
            var empty = true
            for try await found in try await connection.run(
                """
                SELECT EXISTS (SELECT 1 FROM notifications) OR EXISTS (SELECT 1 FROM transactions)
                    OR EXISTS (SELECT 1 FROM subscriptions) OR EXISTS (SELECT 1 FROM customer_links)
                    OR EXISTS (SELECT 1 FROM token_owners) OR EXISTS (SELECT 1 FROM refused_notifications)
                    OR EXISTS (SELECT 1 FROM support_actions) OR EXISTS (SELECT 1 FROM issued_tokens)
                    OR EXISTS (SELECT 1 FROM recovery_watermarks) OR EXISTS (SELECT 1 FROM events)
                    OR EXISTS (SELECT 1 FROM customer_states) OR EXISTS (SELECT 1 FROM webhook_endpoints)
                    OR EXISTS (SELECT 1 FROM deliveries) OR EXISTS (SELECT 1 FROM consumption_requests)
                    OR EXISTS (SELECT 1 FROM consumption_consents) OR EXISTS (SELECT 1 FROM promotional_grants)
                    OR EXISTS (SELECT 1 FROM ledger_secrets) OR EXISTS (SELECT 1 FROM erased_tokens)
                """
            ).decode(Bool.self) { empty = !found }
            return empty
        }
    }

    package func importPage(_ page: LedgerPage) async throws(StorageError) {
        let _: Int = try await write { transaction in
            let connection = transaction.connection
            var changes = LedgerChanges(from: Ledger(), to: Ledger())
            changes.transactions = page.transactions
            changes.subscriptions = page.subscriptions
            changes.links = page.links
            changes.tokenOwners = page.tokenOwners
            try await self.save(connection, transaction.memo, changes, into: transaction.pending)
            // Each notification as it was kept, with when it was received (the same row a write makes).
            for notification in page.notifications {
                transaction.pending.notifications[notification.notificationUUID] = PendingWrites.NotificationRow(
                    uuid: notification.notificationUUID, type: notification.notificationType.rawValue, subtype: notification.subtype?.rawValue,
                    signedDate: notification.signedDate?.epochMilliseconds, environment: notification.environment?.rawValue,
                    outcome: notification.outcome.rawValue, receivedAt: notification.receivedAt.epochMilliseconds,
                    jws: try await self.headers.store(notification.signedPayload, connection, transaction.memo)
                )
            }
            for refusal in page.refused { try await self.insertRefused(refusal, on: connection) }
            for watermark in page.watermarks { try await transaction.setRecoveryWatermark(watermark) }
            for issued in page.issuedTokens {
                try await connection.execute(
                    """
                    INSERT INTO issued_tokens (bundle_id, environment, customer_id, token, issued_at)
                    VALUES (\(issued.bundleId), \(issued.environment.rawValue), \(issued.customerId), \(issued.token.description), \(issued.issuedAt))
                    ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE SET token = excluded.token, issued_at = excluded.issued_at
                    """)
            }
            for (key, erasedAt) in page.erasedTokens {
                try await connection.execute(
                    """
                    INSERT INTO erased_tokens (bundle_id, environment, token, erased_at)
                    VALUES (\(key.bundleId), \(key.environment.rawValue), \(key.token.description), \(erasedAt.epochMilliseconds))
                    ON CONFLICT DO NOTHING
                    """)
            }
            try await self.importOutbox(page, connection)
            return (0, [])
        }
    }

    /// The outbox part of a page: events keep their positions and IDs (the position counter moves past them).
    func importOutbox(_ page: LedgerPage, _ connection: PostgresConnection) async throws {
        let events = page.events
        if !events.isEmpty {
            try await connection.execute(
                """
                INSERT INTO events (position, id, bundle_id, environment, customer_id, sequence, type, occurred_at, cause, changes, state)
                SELECT * FROM unnest(
                    \(events.map(\.position))::bigint[], \(events.map(\.id.description))::text[], \(events.map(\.customer.bundleId))::text[],
                    \(events.map(\.customer.environment.rawValue))::text[], \(events.map(\.customer.customerId))::text[],
                    \(events.map(\.draft.sequence))::bigint[], \(events.map(\.type.rawValue))::text[],
                    \(events.map(\.draft.occurredAt.epochMilliseconds))::bigint[], \(events.map(\.draft.causeJSON))::text[],
                    \(events.map(\.draft.changesJSON))::text[], \(events.map(\.draft.state))::text[])
                """)
            try await connection.execute("UPDATE outbox_position SET last = greatest(last, \(events.map(\.position).max() ?? 0)) WHERE id = 1")
        }
        let states = page.customerStates
        if !states.isEmpty {
            try await connection.execute(
                """
                INSERT INTO customer_states (bundle_id, environment, customer_id, sequence, state, valid_until)
                SELECT b, e, c, s, st, NULLIF(v, -1) FROM unnest(
                    \(states.map(\.customer.bundleId))::text[], \(states.map(\.customer.environment.rawValue))::text[],
                    \(states.map(\.customer.customerId))::text[], \(states.map(\.sequence))::bigint[], \(states.map(\.state))::text[],
                    \(states.map { $0.validUntil?.epochMilliseconds ?? -1 })::bigint[]) AS r(b, e, c, s, st, v)
                """)
        }
        for endpoint in page.endpoints {
            try await connection.execute(
                """
                INSERT INTO webhook_endpoints (name, cursor, failing_since, failing_reason)
                VALUES (\(endpoint.name), \(endpoint.cursor), \(endpoint.failingSince), \(endpoint.failingReason))
                """)
        }
        let deliveries = page.deliveries
        if !deliveries.isEmpty {
            try await connection.execute(
                """
                INSERT INTO deliveries (endpoint, position, bundle_id, environment, customer_id, sequence, status, attempts, next_attempt_at, created_at, finished_at)
                SELECT n, p, b, e, c, s, st, a, na, ca, NULLIF(f, -1) FROM unnest(
                    \(deliveries.map(\.endpoint))::text[], \(deliveries.map(\.position))::bigint[], \(deliveries.map(\.customer.bundleId))::text[],
                    \(deliveries.map(\.customer.environment.rawValue))::text[], \(deliveries.map(\.customer.customerId))::text[],
                    \(deliveries.map(\.sequence))::bigint[], \(deliveries.map(\.status))::text[], \(deliveries.map { Int32($0.attempts) })::integer[],
                    \(deliveries.map(\.nextAttemptAt))::bigint[], \(deliveries.map(\.createdAt))::bigint[],
                    \(deliveries.map { $0.finishedAt ?? -1 })::bigint[]) AS d(n, p, b, e, c, s, st, a, na, ca, f)
                """)
        }
        let attempts = page.attempts
        if !attempts.isEmpty {
            // In the page's order, so that their IDs keep the order they were made in.
            try await connection.execute(
                """
                INSERT INTO delivery_attempts (endpoint, position, attempted_at, status_code, latency_ms, error, response_excerpt)
                SELECT n, p, a, NULLIF(c, -1), l, NULLIF(e, ''), NULLIF(x, '') FROM unnest(
                    \(attempts.map(\.endpoint))::text[], \(attempts.map(\.position))::bigint[],
                    \(attempts.map(\.attempt.attemptedAt.epochMilliseconds))::bigint[], \(attempts.map { Int32($0.attempt.statusCode ?? -1) })::integer[],
                    \(attempts.map(\.attempt.latencyMilliseconds))::bigint[], \(attempts.map { $0.attempt.error ?? "" })::text[],
                    \(attempts.map { $0.attempt.responseExcerpt ?? "" })::text[]) WITH ORDINALITY AS t(n, p, a, c, l, e, x, o)
                ORDER BY o
                """)
        }
        let actions = page.supportActions
        if !actions.isEmpty {
            try await connection.execute(
                """
                INSERT INTO support_actions (id, at, key_name, bundle_id, environment, customer_id, action, target, request, outcome, detail)
                SELECT i, a, k, b, e, c, n, NULLIF(t, ''), r, o, d FROM unnest(
                    \(actions.map(\.id))::bigint[], \(actions.map(\.at.epochMilliseconds))::bigint[], \(actions.map(\.keyName))::text[], \(actions.map(\.customer.bundleId))::text[],
                    \(actions.map(\.customer.environment.rawValue))::text[], \(actions.map(\.customer.customerId))::text[],
                    \(actions.map(\.action))::text[], \(actions.map { $0.target ?? "" })::text[],
                    \(actions.map { SupportAction.text($0.request) })::text[], \(actions.map(\.outcome))::text[],
                    \(actions.map { SupportAction.text($0.detail) })::text[]) AS u(i, a, k, b, e, c, n, t, r, o, d)
                ORDER BY i
                """)
            // The same IDs as the source (an error or a log line names a record by its ID), and the next one after them.
            try await connection.execute("SELECT setval('support_actions_id_seq', (SELECT max(id) FROM support_actions))")
        }
        // Over the rows the trigger made as the page of notifications came in: the source's state of each request.
        for record in page.consumptionRequests {
            try await connection.execute(
                """
                INSERT INTO consumption_requests (\(unescaped: Self.consumptionColumns))
                VALUES (\(record.notificationUUID), \(record.receivedAt.epochMilliseconds), \(record.state.rawValue), \(record.bundleId),
                    \(record.environment?.rawValue), \(record.transactionId), \(record.originalTransactionId), \(record.customerId),
                    \(record.productId), \(record.productType?.rawValue), \(record.reason?.rawValue), \(record.requestedAt?.epochMilliseconds),
                    \(record.deadline?.epochMilliseconds), \(record.decidedBy), \(ConsumptionRequestRecord.text(record.facts)),
                    \(ConsumptionRequestRecord.text(record.answer)), \(Int32(record.attempts)), \(record.nextAttemptAt?.epochMilliseconds),
                    \(record.lastError), \(record.finishedAt?.epochMilliseconds))
                ON CONFLICT (uuid) DO UPDATE SET received_at = excluded.received_at, state = excluded.state, bundle_id = excluded.bundle_id,
                    environment = excluded.environment, transaction_id = excluded.transaction_id,
                    original_transaction_id = excluded.original_transaction_id, customer_id = excluded.customer_id,
                    product_id = excluded.product_id, product_type = excluded.product_type, reason = excluded.reason,
                    requested_at = excluded.requested_at, deadline = excluded.deadline, decided_by = excluded.decided_by, facts = excluded.facts,
                    answer = excluded.answer, attempts = excluded.attempts, next_attempt_at = excluded.next_attempt_at,
                    last_error = excluded.last_error, finished_at = excluded.finished_at
                """)
        }
        for copied in page.consumptionConsents {
            try await connection.execute(
                """
                INSERT INTO consumption_consents (bundle_id, environment, customer_id, consented, at)
                VALUES (\(copied.customer.bundleId), \(copied.customer.environment.rawValue), \(copied.customer.customerId),
                    \(copied.consent.consented), \(copied.consent.at.epochMilliseconds))
                """)
        }
        for grant in page.promotionalGrants { try await Self.save(grant, connection) }
    }
}
