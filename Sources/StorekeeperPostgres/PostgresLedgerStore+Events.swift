import AppStoreModels
package import Foundation
import PostgresNIO
package import StorekeeperCore

extension PostgresWriteTransaction {
    /// The advisory lock key of a customer's outbox state.
    static func lockKey(customer: CustomerKey) -> String {
        "customer \(customer.bundleId) \(customer.environment.rawValue) \(customer.customerId)"
    }

    /// Locks the customers' states (after every family lock of the unit of work, so two writers never wait for
    /// each other's families while holding a customer), then reads their ledgers (one statement, begun after the
    /// locks: it sees what the writers before committed) and their states.
    func readCustomers(_ reads: OutboxReads) async throws -> OutboxReadResults {
        let keys = reads.customers
        try await flush()
        var results = OutboxReadResults()
        guard store.outbox.isEnabled else {
            results.enabled = false
            return results
        }
        results.configuration = store.outbox.entitlements
        var locks = PostgresBindings(capacity: 1)
        locks.append(keys.map(Self.lockKey(customer:)))
        for try await _ in try await connection.run(LockStatement.self, locks) {}
        // The time the customers are judged at, taken once their locks are held: a write that waited for another
        // instance's is judged after it, not at a moment before it (which could find an expiry that write recorded
        // undone).
        results.now = store.outbox.now
        let scopes = keys.map { CustomerScope(customerId: $0.customerId, bundleId: $0.bundleId, environment: $0.environment) }
        let ledgers = try await store.loadCustomers(connection, scopes, entitlementsOnly: false, memo: memo)
        for (key, ledger) in zip(keys, ledgers) { results.ledgers[key] = ledger }
        let rows = try await connection.run(
            """
            SELECT s.bundle_id, s.environment, s.customer_id, s.sequence, s.state, s.valid_until, ev.state FROM customer_states s
            JOIN unnest(\(keys.map(\.bundleId))::text[], \(keys.map(\.environment.rawValue))::text[], \(keys.map(\.customerId))::text[]) AS k(b, e, c)
            ON s.bundle_id = k.b AND s.environment = k.e AND s.customer_id = k.c
            LEFT JOIN events ev ON ev.bundle_id = s.bundle_id AND ev.environment = s.environment AND ev.customer_id = s.customer_id
                AND ev.sequence = s.sequence
            """)
        for try await (bundleId, environment, customerId, sequence, state, validUntil, lastEventState) in rows.decode(
            (String, String, String, Int64, String, Int64?, String?).self)
        {
            let key = CustomerKey(bundleId: bundleId, environment: AppStoreEnvironment(rawValue: environment), customerId: customerId)
            results.stored[key] = CustomerStateRecord(
                customer: key, sequence: sequence, state: state, validUntil: validUntil.map(Date.init(epochMilliseconds:)))
            if let lastEventState { results.lastEventStates[key] = lastEventState }
        }
        return results
    }

    /// Appends the events at the next positions (the position row stays locked until the commit: positions follow
    /// commit order) and records the states.
    func appendEvents(_ append: OutboxAppend) async throws {
        try await flush()
        let drafts = append.drafts
        if !drafts.isEmpty {
            let ids = drafts.map { _ in store.eventIDs.next().description }
            try await connection.execute(
                """
                WITH p AS (UPDATE outbox_position SET last = last + \(Int64(drafts.count)) WHERE id = 1 RETURNING last)
                INSERT INTO events (position, id, bundle_id, environment, customer_id, sequence, type, occurred_at, cause, changes, state)
                SELECT p.last - \(Int64(drafts.count)) + e.n, e.id, e.b, e.env, e.c, e.s, e.t, e.o, e.cause, e.changes, e.state
                FROM p, unnest(
                    \(ids)::text[], \(drafts.map(\.customer.bundleId))::text[], \(drafts.map(\.customer.environment.rawValue))::text[],
                    \(drafts.map(\.customer.customerId))::text[], \(drafts.map(\.sequence))::bigint[], \(drafts.map(\.type.rawValue))::text[],
                    \(drafts.map(\.occurredAt.epochMilliseconds))::bigint[], \(drafts.map(\.causeJSON))::text[],
                    \(drafts.map(\.changesJSON))::text[], \(drafts.map(\.state))::text[]
                ) WITH ORDINALITY AS e(id, b, env, c, s, t, o, cause, changes, state, n)
                """)
        }
        let records = append.records
        if !records.isEmpty {
            try await connection.execute(
                """
                INSERT INTO customer_states (bundle_id, environment, customer_id, sequence, state, valid_until)
                SELECT b, e, c, s, st, NULLIF(v, -1) FROM unnest(
                    \(records.map(\.customer.bundleId))::text[], \(records.map(\.customer.environment.rawValue))::text[],
                    \(records.map(\.customer.customerId))::text[], \(records.map(\.sequence))::bigint[], \(records.map(\.state))::text[],
                    \(records.map { $0.validUntil?.epochMilliseconds ?? -1 })::bigint[]) AS r(b, e, c, s, st, v)
                ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE
                SET sequence = excluded.sequence, state = excluded.state, valid_until = excluded.valid_until
                """)
        }
    }
}

extension PostgresLedgerStore {
    static let eventColumns = "position, id, bundle_id, environment, customer_id, sequence, type, occurred_at, cause, changes, state"

    static func events(_ rows: PostgresRowSequence) async throws -> [LedgerEvent] {
        var events: [LedgerEvent] = []
        for try await row in rows {
            let (position, id, bundleId, environment, customerId, sequence, type, occurredAt, cause, changes, state) = try row.decode(
                (Int64, String, String, String, String, Int64, String, Int64, String, String, String).self)
            if let event = LedgerEvent(
                position: position, id: id, bundleId: bundleId, environment: environment, customerId: customerId, sequence: sequence, type: type,
                occurredAt: occurredAt, cause: cause, changes: changes, state: state)
            {
                events.append(event)
            }
        }
        return events
    }

    package func events(after position: Int64, limit: Int, filter: EventFilter) async throws(StorageError) -> [LedgerEvent] {
        if filter.bundleIds?.isEmpty == true || filter.types?.isEmpty == true { return [] }
        let bundleIds = filter.bundleIds.map { Array($0).sorted() }
        let types = filter.types.map { $0.map(\.rawValue).sorted() }
        return try await read { connection in
            try await Self.events(
                connection.run(
                    """
                    SELECT \(unescaped: Self.eventColumns) FROM events
                    WHERE position > \(position)
                    AND (\(bundleIds)::text[] IS NULL OR bundle_id = ANY(\(bundleIds)::text[]))
                    AND (\(filter.environment?.rawValue)::text IS NULL OR environment = \(filter.environment?.rawValue)::text)
                    AND (\(filter.customerId)::text IS NULL OR customer_id = \(filter.customerId)::text)
                    AND (\(filter.since?.epochMilliseconds)::bigint IS NULL OR occurred_at >= \(filter.since?.epochMilliseconds)::bigint)
                    AND (\(types)::text[] IS NULL OR type = ANY(\(types)::text[]))
                    ORDER BY position LIMIT \(Int64(max(0, limit)))
                    """))
        }
    }

    package func event(_ id: EventID) async throws(StorageError) -> LedgerEvent? {
        try await read { connection in
            try await Self.events(connection.run("SELECT \(unescaped: Self.eventColumns) FROM events WHERE id = \(id.description)")).first
        }
    }

    package func lastEventPosition() async throws(StorageError) -> Int64 {
        try await read { connection in
            var last: Int64 = 0
            for try await value in try await connection.run("SELECT last FROM outbox_position WHERE id = 1").decode(Int64.self) { last = value }
            return last
        }
    }

    package func ledgerSecret(_ name: String, orNew new: [UInt8]) async throws(StorageError) -> [UInt8] {
        try await write { transaction in
            let connection = transaction.connection
            try await connection.execute(
                "INSERT INTO ledger_secrets (name, value) VALUES (\(name), \(ByteBuffer(bytes: new))) ON CONFLICT (name) DO NOTHING")
            var kept = new
            for try await value in try await connection.run("SELECT value FROM ledger_secrets WHERE name = \(name)").decode(ByteBuffer.self) {
                kept = Array(buffer: value)
            }
            return (kept, [])
        }
    }

    package func customersDue(at date: Date, limit: Int) async throws(StorageError) -> [CustomerKey] {
        try await read { connection in
            var keys: [CustomerKey] = []
            let rows = try await connection.run(
                """
                SELECT bundle_id, environment, customer_id FROM customer_states
                WHERE valid_until IS NOT NULL AND valid_until <= \(date.epochMilliseconds) ORDER BY valid_until LIMIT \(Int64(limit))
                """)
            for try await (bundleId, environment, customerId) in rows.decode((String, String, String).self) {
                keys.append(CustomerKey(bundleId: bundleId, environment: AppStoreEnvironment(rawValue: environment), customerId: customerId))
            }
            return keys
        }
    }

    package func reevaluate(_ customers: [CustomerKey]) async throws(StorageError) -> Int {
        let keys = Array(Set(customers)).sorted()
        return try await write { transaction in
            (try await LedgerUnitOfWork.reevaluating(keys).run(in: transaction), Set(keys.map(\.customerId)))
        }
    }

    package func pruneEvents(occurredBefore date: Date, keepingUnsentTo endpoints: [String]) async throws(StorageError) -> Int {
        try await write { transaction in
            let connection = transaction.connection
            var count = 0
            for try await _ in try await connection.run(
                """
                DELETE FROM events WHERE id < \(EventID.first(at: date).description)
                AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.position = events.position AND d.status = 'pending')
                AND position < (SELECT max(position) FROM events)
                AND position <= coalesce(
                    (SELECT min(cursor) FROM webhook_endpoints WHERE name = ANY(\(endpoints))), 9223372036854775807)
                RETURNING 1
                """
            ) { count += 1 }
            try await connection.execute(
                "DELETE FROM deliveries WHERE status <> 'pending' AND NOT EXISTS (SELECT 1 FROM events e WHERE e.position = deliveries.position)")
            try await connection.execute(
                "DELETE FROM delivery_attempts WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.position = delivery_attempts.position)")
            return (count, [])
        }
    }
}

extension PostgresLedgerStore {
    package func erase(_ customer: CustomerKey) async throws(StorageError) -> CustomerErasure? {
        let now = outbox.now
        let (customerId, bundleId, environment) = (customer.customerId, customer.bundleId, customer.environment.rawValue)
        return try await write { transaction in
            let connection = transaction.connection
            // The customer's outbox lock: no write appends their events meanwhile.
            var locks = PostgresBindings(capacity: 1)
            locks.append([PostgresWriteTransaction.lockKey(customer: customer)])
            for try await _ in try await connection.run(LockStatement.self, locks) {}
            var known = false
            for try await value in try await connection.run(
                """
                SELECT EXISTS (SELECT 1 FROM token_owners WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment))
                OR EXISTS (SELECT 1 FROM customer_links l JOIN transactions t
                    ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
                    WHERE l.customer_id = \(customerId) AND l.environment = \(environment) AND t.bundle_id = \(bundleId))
                OR EXISTS (SELECT 1 FROM promotional_grants
                    WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment))
                """
            ).decode(Bool.self) { known = value }
            guard known else { return (nil, []) }
            // Their purchases (linked, or carrying one of their tokens), whose owners are looked at again once the
            // identity is gone.
            var families: [LedgerKey] = []
            for try await original in try await connection.run(
                """
                SELECT original_transaction_id FROM customer_links WHERE customer_id = \(customerId) AND environment = \(environment)
                UNION
                SELECT t.original_transaction_id FROM token_owners o JOIN transactions t
                    ON t.app_account_token = o.token AND t.environment = o.environment
                    WHERE o.customer_id = \(customerId) AND o.bundle_id = \(bundleId) AND o.environment = \(environment)
                ORDER BY 1
                """
            ).decode(String.self) { families.append(LedgerKey(customer.environment, original)) }
            func count(_ query: PostgresQuery) async throws -> Int {
                var rows = 0
                for try await _ in try await connection.run(query) { rows += 1 }
                return rows
            }
            let links = try await count(
                """
                DELETE FROM customer_links WHERE customer_id = \(customerId) AND environment = \(environment) AND original_transaction_id IN
                    (SELECT original_transaction_id FROM transactions WHERE environment = \(environment) AND bundle_id = \(bundleId)) RETURNING 1
                """)
            // Their tokens are retired, not freed (as on SQLite).
            try await connection.execute(
                """
                INSERT INTO erased_tokens (bundle_id, environment, token, erased_at)
                SELECT bundle_id, environment, token, \(now.epochMilliseconds) FROM token_owners
                    WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)
                UNION SELECT bundle_id, environment, token, \(now.epochMilliseconds) FROM issued_tokens
                    WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)
                ON CONFLICT DO NOTHING
                """)
            let tokens = try await count(
                "DELETE FROM token_owners WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment) RETURNING 1")
            try await connection.execute(
                "DELETE FROM issued_tokens WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)")
            try await connection.execute(
                "DELETE FROM consumption_consents WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)")
            // Their refund requests stay but name no one (as on SQLite).
            try await connection.execute(
                "UPDATE consumption_requests SET customer_id = NULL WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)"
            )
            try await connection.execute(
                "DELETE FROM promotional_grants WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)")
            try await connection.execute(
                """
                DELETE FROM delivery_attempts WHERE position IN (SELECT position FROM events
                    WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment))
                """)
            // A delivery an instance is sending now stays until it is finished: its customer's erasure event waits
            // behind it, rather than overtake it (its event gone, a retry of it is marked dead, not sent).
            try await connection.execute(
                """
                DELETE FROM deliveries WHERE position IN (SELECT position FROM events
                    WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment))
                AND NOT (status = 'pending' AND claimed_until IS NOT NULL AND claimed_until >= \(unescaped: Self.databaseMilliseconds))
                """)
            let events = try await count(
                "DELETE FROM events WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment) RETURNING 1")
            var stored: CustomerStateRecord?
            for try await sequence in try await connection.run(
                "SELECT sequence FROM customer_states WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment)"
            ).decode(Int64.self) { stored = CustomerStateRecord(customer: customer, sequence: sequence, state: "", validUntil: nil) }
            let (draft, record) = CustomerErasure.event(
                for: customer, after: stored, at: now,
                removed: ["linksRemoved": .integer(Int64(links)), "tokensRemoved": .integer(Int64(tokens)), "eventsRemoved": .integer(Int64(events))])
            var append = OutboxAppend()
            append.drafts = [draft]
            append.records = [record]
            try await transaction.appendEvents(append)
            var id = ""
            for try await value in try await connection.run(
                "SELECT id FROM events WHERE customer_id = \(customerId) AND bundle_id = \(bundleId) AND environment = \(environment) ORDER BY position DESC LIMIT 1"
            ).decode(String.self) { id = value }
            let others = try await LedgerUnitOfWork.reevaluatingOwners(of: families, bundleId: bundleId, erased: customerId).run(in: transaction)
                .customers
            // Other customers' events that name them (a transfer's `to` or `from`) no longer do.
            let quoted = CustomerErasure.quoted(customerId)
            var naming: [(position: Int64, changes: String, cause: String)] = []
            for try await row in try await connection.run(
                """
                SELECT position, changes, cause FROM events WHERE bundle_id = \(bundleId) AND environment = \(environment)
                    AND customer_id <> \(customerId) AND (strpos(changes, \(quoted)) > 0 OR strpos(cause, \(quoted)) > 0)
                """
            ).decode((Int64, String, String).self) { naming.append(row) }
            for (position, changes, cause) in naming {
                guard let scrubbed = CustomerErasure.scrubbing(changes: changes, cause: cause, of: customerId) else { continue }
                try await connection.execute(
                    "UPDATE events SET changes = \(scrubbed.changes), cause = \(scrubbed.cause) WHERE position = \(position)")
            }
            return (
                CustomerErasure(
                    customerId: customerId, bundleId: bundleId, environment: environment, linksRemoved: links, tokensRemoved: tokens,
                    eventsRemoved: events,
                    eventId: id),
                others.union([customerId])
            )
        }
    }
}
