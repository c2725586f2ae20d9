import AppStoreModels
package import Foundation
import GRDB
package import StorekeeperCore

extension SQLiteWriteTransaction {
    /// Rows `(kind, text, sequence, valid_until, extra)` for customer `?1` of app `?2` in environment `?3`: kind 0 a
    /// token, 1 a linked family, 2 a family carrying one of their tokens (extra: the token), 3 their recorded state
    /// (text, sequence, valid_until; extra: the state of their event of that sequence, if kept), 4 present when they
    /// have promotional grants. `CROSS JOIN` keeps the customer's tokens as the outer
    /// loop: left to itself, SQLite's planner searched every transaction of the environment for each.
    static let outboxCustomerSQL = """
        SELECT 0, token, NULL, NULL, NULL FROM token_owners WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3
        UNION ALL
        SELECT 1, original_transaction_id, NULL, NULL, NULL FROM customer_links WHERE customer_id = ?1 AND environment = ?3
        UNION ALL
        SELECT 2, t.original_transaction_id, NULL, NULL, o.token FROM token_owners o
            CROSS JOIN transactions t ON t.app_account_token = lower(o.token) AND t.environment = o.environment
            WHERE o.customer_id = ?1 AND o.bundle_id = ?2 AND o.environment = ?3
        UNION ALL
        SELECT 3, s.state, s.sequence, s.valid_until, e.state FROM customer_states s
            LEFT JOIN events e ON e.bundle_id = s.bundle_id AND e.environment = s.environment AND e.customer_id = s.customer_id
                AND e.sequence = s.sequence
            WHERE s.bundle_id = ?2 AND s.environment = ?3 AND s.customer_id = ?1
        UNION ALL
        SELECT 4, NULL, NULL, NULL, NULL WHERE EXISTS (
            SELECT 1 FROM promotional_grants WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3)
        """

    func readCustomers(_ reads: OutboxReads) throws -> OutboxReadResults {
        let keys = reads.customers
        var results = OutboxReadResults()
        guard store.outbox.isEnabled else {
            results.enabled = false
            return results
        }
        results.configuration = store.outbox.entitlements
        results.now = store.outbox.now
        for key in keys {
            var ledger = Ledger()
            var originals = Set<String>()
            var hasGrants = false
            // One statement for all the outbox reads of a customer: their tokens, the families linked to them or
            // carrying one of those tokens, whether they have promotional grants, and their recorded state (five
            // statements cost the writer more than their searches).
            let rows = try Row.fetchCursor(
                db.cachedStatement(sql: Self.outboxCustomerSQL), arguments: [key.customerId, key.bundleId, key.environment.rawValue])
            while let row = try rows.next() {
                switch row[0] as Int {
                case 0:
                    if let token = LowercaseUUID(uuidString: row[1]) {
                        ledger.tokenOwners[AppAccountTokenKey(bundleId: key.bundleId, environment: key.environment, token: token)] = key.customerId
                    }
                case 1: originals.insert(row[1])
                case 2: if LowercaseUUID(uuidString: row[4]) != nil { originals.insert(row[1]) }
                case 3:
                    results.stored[key] = CustomerStateRecord(
                        customer: key, sequence: row[2], state: row[1], validUntil: (row[3] as Int64?).map(Date.init(epochMilliseconds:)))
                    if let state = row[4] as String? { results.lastEventStates[key] = state }
                default: hasGrants = true
                }
            }
            // The families the unit of work holds are taken from its snapshots: not loaded (nor decoded) again.
            for original in originals.sorted() where !reads.known.contains(LedgerKey(key.environment, original)) {
                try store.loadSubscriptionFamily(db, memo, LedgerKey(key.environment, original), into: &ledger)
            }
            if hasGrants { try SQLiteLedgerStore.loadGrants(db, key, into: &ledger) }
            results.ledgers[key] = ledger
        }
        return results
    }

    func appendEvents(_ append: OutboxAppend) throws {
        for draft in append.drafts {
            try db.cachedStatement(
                sql: """
                    INSERT INTO events (id, bundle_id, environment, customer_id, sequence, type, occurred_at, cause, changes, state)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                store.eventIDs.next().description, draft.customer.bundleId, draft.customer.environment.rawValue, draft.customer.customerId,
                draft.sequence, draft.type.rawValue, draft.occurredAt.epochMilliseconds, draft.causeJSON, draft.changesJSON, draft.state,
            ])
        }
        for record in append.records {
            try db.cachedStatement(
                sql: """
                    INSERT INTO customer_states (bundle_id, environment, customer_id, sequence, state, valid_until) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE
                    SET sequence = excluded.sequence, state = excluded.state, valid_until = excluded.valid_until
                    """
            ).execute(arguments: [
                record.customer.bundleId, record.customer.environment.rawValue, record.customer.customerId, record.sequence, record.state,
                record.validUntil?.epochMilliseconds,
            ])
        }
    }
}

extension SQLiteLedgerStore {
    static let eventColumns = "position, id, bundle_id, environment, customer_id, sequence, type, occurred_at, cause, changes, state"

    static func event(_ row: Row) -> LedgerEvent? {
        LedgerEvent(
            position: row["position"], id: row["id"], bundleId: row["bundle_id"], environment: row["environment"], customerId: row["customer_id"],
            sequence: row["sequence"], type: row["type"], occurredAt: row["occurred_at"], cause: row["cause"], changes: row["changes"],
            state: row["state"])
    }

    /// Adds `column IN (values…)` (sorted, so that a statement's text repeats) to a query's conditions; nothing when
    /// `values` is `nil` (no restriction), a condition that holds for no row when it is empty.
    static func whereIn(_ column: String, _ values: [String]?, _ conditions: inout [String], _ arguments: inout StatementArguments) {
        guard let values else { return }
        conditions.append(values.isEmpty ? "0" : "\(column) IN (\(values.map { _ in "?" }.joined(separator: ", ")))")
        for value in values.sorted() { arguments += [value] }
    }

    package func events(after position: Int64, limit: Int, filter: EventFilter) async throws(StorageError) -> [LedgerEvent] {
        try await read { db in
            var conditions = ["position > ?"]
            var arguments: StatementArguments = [position]
            if filter.bundleIds?.isEmpty == true || filter.types?.isEmpty == true { return [] }
            Self.whereIn("bundle_id", filter.bundleIds.map(Array.init), &conditions, &arguments)
            if let environment = filter.environment {
                conditions.append("environment = ?")
                arguments += [environment.rawValue]
            }
            if let customerId = filter.customerId {
                conditions.append("customer_id = ?")
                arguments += [customerId]
            }
            if let since = filter.since {
                conditions.append("occurred_at >= ?")
                arguments += [since.epochMilliseconds]
            }
            Self.whereIn("type", filter.types.map { $0.map(\.rawValue) }, &conditions, &arguments)
            arguments += [max(0, limit)]
            return try Row.fetchAll(
                db, sql: "SELECT \(Self.eventColumns) FROM events WHERE \(conditions.joined(separator: " AND ")) ORDER BY position LIMIT ?",
                arguments: arguments
            ).compactMap(Self.event)
        }
    }

    package func event(_ id: EventID) async throws(StorageError) -> LedgerEvent? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.eventColumns) FROM events WHERE id = ?", arguments: [id.description]).flatMap(Self.event)
        }
    }

    package func lastEventPosition() async throws(StorageError) -> Int64 {
        try await read { db in try Int64.fetchOne(db, sql: "SELECT max(position) FROM events") ?? 0 }
    }

    package func ledgerSecret(_ name: String, orNew new: [UInt8]) async throws(StorageError) -> [UInt8] {
        try await write { db, _ in
            try db.execute(sql: "INSERT INTO ledger_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", arguments: [name, Data(new)])
            return try Data.fetchOne(db, sql: "SELECT value FROM ledger_secrets WHERE name = ?", arguments: [name]).map { Array($0) } ?? new
        }
    }

    package func ledgerSecrets() async throws(StorageError) -> [String: [UInt8]] {
        try await read { db in
            var secrets: [String: [UInt8]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT name, value FROM ledger_secrets") { secrets[row["name"]] = Array(row["value"] as Data) }
            return secrets
        }
    }

    package func customersDue(at date: Date, limit: Int) async throws(StorageError) -> [CustomerKey] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT bundle_id, environment, customer_id FROM customer_states
                    WHERE valid_until IS NOT NULL AND valid_until <= ? ORDER BY valid_until LIMIT ?
                    """, arguments: [date.epochMilliseconds, limit]
            ).map {
                CustomerKey(bundleId: $0["bundle_id"], environment: AppStoreEnvironment(rawValue: $0["environment"]), customerId: $0["customer_id"])
            }
        }
    }

    package func reevaluate(_ customers: [CustomerKey]) async throws(StorageError) -> Int {
        let keys = Array(Set(customers)).sorted()
        return try await writeAnnouncing { db, memo in
            let count = try LedgerUnitOfWork.reevaluating(keys).run(in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
            return (count, [])
        }
    }

    package func pruneEvents(occurredBefore date: Date, keepingUnsentTo endpoints: [String]) async throws(StorageError) -> Int {
        try await write { db, _ in
            var arguments: StatementArguments = [EventID.first(at: date).description]
            for endpoint in endpoints { arguments += [endpoint] }
            try db.execute(
                sql: """
                    DELETE FROM events WHERE id < ?
                    AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.position = events.position AND d.status = 'pending')
                    AND position < (SELECT max(position) FROM events)
                    AND position <= coalesce(
                        (SELECT min(cursor) FROM webhook_endpoints WHERE name IN (\(endpoints.map { _ in "?" }.joined(separator: ", ")))),
                        9223372036854775807)
                    """, arguments: arguments)
            let count = db.changesCount
            try db.execute(
                sql: """
                    DELETE FROM deliveries WHERE status != 'pending' AND NOT EXISTS (SELECT 1 FROM events e WHERE e.position = deliveries.position)
                    """)
            try db.execute(
                sql: "DELETE FROM delivery_attempts WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.position = delivery_attempts.position)")
            return count
        }
    }
}

extension SQLiteLedgerStore {
    package func erase(_ customer: CustomerKey) async throws(StorageError) -> CustomerErasure? {
        let now = outbox.now
        return try await writeAnnouncing { db, memo in
            let known =
                try Bool.fetchOne(
                    db,
                    sql: """
                        SELECT EXISTS (SELECT 1 FROM token_owners WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3)
                        OR EXISTS (SELECT 1 FROM customer_links l JOIN transactions t
                            ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
                            WHERE l.customer_id = ?1 AND l.environment = ?3 AND t.bundle_id = ?2)
                        OR EXISTS (SELECT 1 FROM promotional_grants WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3)
                        """, arguments: [customer.customerId, customer.bundleId, customer.environment.rawValue]) ?? false
            guard known else { return (nil, []) }
            // Their purchases (linked, or carrying one of their tokens), whose owners are looked at again once the
            // identity is gone.
            let families = try self.customerFamilies(db, customer.customerId, customer.bundleId, customer.environment).originals.sorted()
                .map { LedgerKey(customer.environment, $0) }
            let arguments: StatementArguments = [customer.customerId, customer.bundleId, customer.environment.rawValue]
            try db.execute(
                sql: """
                    DELETE FROM customer_links WHERE customer_id = ?1 AND environment = ?3 AND original_transaction_id IN
                        (SELECT original_transaction_id FROM transactions WHERE environment = ?3 AND bundle_id = ?2)
                    """, arguments: arguments)
            let links = db.changesCount
            // Their tokens are retired, not freed: a later submission carrying one does not take it (nor, with it, the
            // purchases made under this identity).
            try db.execute(
                sql: """
                    INSERT OR IGNORE INTO erased_tokens (bundle_id, environment, token, erased_at)
                    SELECT bundle_id, environment, token, ?4 FROM token_owners WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3
                    UNION SELECT bundle_id, environment, token, ?4 FROM issued_tokens WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3
                    """, arguments: arguments + [now.epochMilliseconds])
            try db.execute(sql: "DELETE FROM token_owners WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3", arguments: arguments)
            let tokens = db.changesCount
            try db.execute(sql: "DELETE FROM issued_tokens WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3", arguments: arguments)
            try db.execute(
                sql: "DELETE FROM consumption_consents WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3", arguments: arguments)
            // Their refund requests stay (Apple's, about a purchase) but name no one: an open one is then sent under
            // nobody's consent, which is none, and a later customer of the same ID does not consent for them.
            try db.execute(
                sql: "UPDATE consumption_requests SET customer_id = NULL WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3",
                arguments: arguments)
            // Grants are not financial records: they go with the identity (the audit log keeps who granted what).
            try db.execute(
                sql: "DELETE FROM promotional_grants WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3", arguments: arguments)
            let events =
                try Int.fetchOne(
                    db, sql: "SELECT count(*) FROM events WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3", arguments: arguments) ?? 0
            let stored = try Row.fetchOne(
                db, sql: "SELECT sequence FROM customer_states WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3", arguments: arguments
            ).map { CustomerStateRecord(customer: customer, sequence: $0["sequence"], state: "", validUntil: nil) }
            let (draft, record) = CustomerErasure.event(
                for: customer, after: stored, at: now,
                removed: ["linksRemoved": .integer(Int64(links)), "tokensRemoved": .integer(Int64(tokens)), "eventsRemoved": .integer(Int64(events))])
            var append = OutboxAppend()
            append.drafts = [draft]
            append.records = [record]
            let transaction = SQLiteWriteTransaction(store: self, db: db, memo: memo)
            try transaction.appendEvents(append)
            let position = db.lastInsertedRowID
            let id = try String.fetchOne(db, sql: "SELECT id FROM events WHERE position = ?", arguments: [position]) ?? ""
            let others = try LedgerUnitOfWork.reevaluatingOwners(of: families, bundleId: customer.bundleId, erased: customer.customerId)
                .run(in: transaction).customers
            // The earlier events go after the erasure's is appended: the newest event is never deleted, so SQLite
            // never hands out a position again (a new row takes the largest position plus one), which would put an
            // event behind every endpoint's cursor and every poller's.
            let earlier = "SELECT position FROM events WHERE customer_id = ?1 AND bundle_id = ?2 AND environment = ?3 AND position < ?4"
            let bounded: StatementArguments = [customer.customerId, customer.bundleId, customer.environment.rawValue, position]
            try db.execute(sql: "DELETE FROM delivery_attempts WHERE position IN (\(earlier))", arguments: bounded)
            // A delivery being sent now stays until it is finished: the erasure's event waits behind it, rather than
            // overtake it (its event gone, a retry of it is marked dead, not sent).
            var sending = bounded
            sending += [Date().epochMilliseconds]
            try db.execute(
                sql:
                    "DELETE FROM deliveries WHERE position IN (\(earlier)) AND NOT (status = 'pending' AND claimed_until IS NOT NULL AND claimed_until >= ?5)",
                arguments: sending)
            try db.execute(sql: "DELETE FROM events WHERE position IN (\(earlier))", arguments: bounded)
            // Other customers' events that name them (a transfer's `to` or `from`) no longer do.
            let naming = try Row.fetchAll(
                db,
                sql: """
                    SELECT position, changes, cause FROM events WHERE bundle_id = ?1 AND environment = ?2 AND customer_id <> ?3
                        AND (instr(changes, ?4) > 0 OR instr(cause, ?4) > 0)
                    """,
                arguments: [customer.bundleId, customer.environment.rawValue, customer.customerId, CustomerErasure.quoted(customer.customerId)])
            for row in naming {
                guard let scrubbed = CustomerErasure.scrubbing(changes: row["changes"], cause: row["cause"], of: customer.customerId) else {
                    continue
                }
                try db.execute(
                    sql: "UPDATE events SET changes = ?, cause = ? WHERE position = ?",
                    arguments: [scrubbed.changes, scrubbed.cause, row["position"] as Int64])
            }
            return (
                CustomerErasure(
                    customerId: customer.customerId, bundleId: customer.bundleId, environment: customer.environment.rawValue, linksRemoved: links,
                    tokensRemoved: tokens, eventsRemoved: events, eventId: id),
                others.union([customer.customerId])
            )
        }
    }
}
