package import AppStoreModels
package import Foundation
import PostgresNIO
package import StorekeeperCore

extension PostgresLedgerStore {
    package func supportLookup(_ lookup: SupportLookup, in apps: [VerifierKey]) async throws(StorageError) -> Ledger {
        let environments = Set(apps.map(\.environment.rawValue)).sorted()
        return try await read { connection in
            let rows: PostgresRowSequence
            switch lookup {
            case .transactionId(let id):
                rows = try await connection.run(
                    """
                    SELECT environment, original_transaction_id FROM transactions
                    WHERE environment = ANY(\(environments)) AND transaction_id = \(id)
                    """)
            case .originalTransactionId(let id):
                rows = try await connection.run(
                    """
                    SELECT DISTINCT environment, original_transaction_id FROM transactions
                    WHERE environment = ANY(\(environments)) AND original_transaction_id = \(id)
                    """)
            case .appAccountToken(let token):
                rows = try await connection.run(
                    """
                    SELECT DISTINCT environment, original_transaction_id FROM transactions
                    WHERE app_account_token = \(token.description) AND environment = ANY(\(environments))
                    """)
            }
            var families: [LedgerKey] = []
            for try await (environment, original) in rows.decode((String, String).self) {
                families.append(LedgerKey(AppStoreEnvironment(rawValue: environment), original))
            }
            var ledger = Ledger()
            try await self.loadFamilies(connection, nil, families.sorted(), into: &ledger)
            // The owners of the tokens that may name the purchases' customers, and of the token searched for.
            let tokens = ledger.tokensNamingOwners(searched: lookup, in: apps)
            try await self.loadFamilies(connection, nil, [], tokens: tokens, into: &ledger)
            return ledger
        }
    }
}

extension PostgresLedgerStore {
    package func recordSupportAction(_ action: SupportAction) async throws(StorageError) -> Int64 {
        try await write { transaction in (try await Self.insert(action, transaction.connection), []) }
    }

    package func recordSupportAction(_ action: SupportAction, unlessDoneSince since: Date) async throws(StorageError) -> SupportActionClaim {
        try await write { transaction in
            let connection = transaction.connection
            // A lock on the claim's name (customer, action, target), held to the commit: instances claiming the same
            // wait for each other, and the second sees the first's row.
            let name = [
                action.customer.bundleId, action.customer.environment.rawValue, action.customer.customerId, action.action, action.target ?? "",
            ]
            .joined(separator: "\u{1F}")
            try await connection.execute("SELECT pg_advisory_xact_lock(hashtextextended(\(name), 0))")
            for try await done in try await connection.run(
                """
                SELECT max(at) FROM support_actions WHERE bundle_id = \(action.customer.bundleId)
                AND environment = \(action.customer.environment.rawValue) AND customer_id = \(action.customer.customerId)
                AND action = \(action.action) AND target IS NOT DISTINCT FROM \(action.target) AND outcome = 'done'
                AND at >= \(since.epochMilliseconds)
                """
            ).decode(Int64?.self) {
                if let done { return (.alreadyDone(at: Date(epochMilliseconds: done)), []) }
            }
            return (.recorded(try await Self.insert(action, connection)), [])
        }
    }

    /// Appends `action` to the audit log; its ID.
    static func insert(_ action: SupportAction, _ connection: PostgresConnection) async throws -> Int64 {
        var id: Int64 = 0
        for try await inserted in try await connection.run(
            """
            INSERT INTO support_actions (at, key_name, bundle_id, environment, customer_id, action, target, request, outcome, detail)
            VALUES (\(action.at.epochMilliseconds), \(action.keyName), \(action.customer.bundleId), \(action.customer.environment.rawValue),
            \(action.customer.customerId), \(action.action), \(action.target), \(SupportAction.text(action.request)), \(action.outcome),
            \(SupportAction.text(action.detail))) RETURNING id
            """
        ).decode(Int64.self) { id = inserted }
        return id
    }

    package func supportActions(customer: CustomerKey) async throws(StorageError) -> [SupportAction] {
        try await read { connection in
            try await Self.supportActions(
                connection.run(
                    """
                    SELECT \(unescaped: Self.supportActionColumns) FROM support_actions
                    WHERE bundle_id = \(customer.bundleId) AND environment = \(customer.environment.rawValue) AND customer_id = \(customer.customerId)
                    ORDER BY id
                    """))
        }
    }

    package func supportActions(target: String, environment: AppStoreEnvironment) async throws(StorageError) -> [SupportAction] {
        try await read { connection in
            try await Self.supportActions(
                connection.run(
                    """
                    SELECT \(unescaped: Self.supportActionColumns) FROM support_actions
                    WHERE environment = \(environment.rawValue) AND target = \(target) ORDER BY id
                    """))
        }
    }

    static let supportActionColumns = "id, at, key_name, bundle_id, environment, customer_id, action, target, request, outcome, detail"

    static func supportActions(_ rows: PostgresRowSequence) async throws -> [SupportAction] {
        var actions: [SupportAction] = []
        for try await (id, at, keyName, bundleId, environment, customerId, action, target, request, outcome, detail) in rows.decode(
            (Int64, Int64, String, String, String, String, String, String?, String, String, String).self)
        {
            actions.append(
                SupportAction(
                    id: id, at: Date(epochMilliseconds: at), keyName: keyName,
                    customer: CustomerKey(bundleId: bundleId, environment: AppStoreEnvironment(rawValue: environment), customerId: customerId),
                    action: action, target: target, request: SupportAction.object(request), outcome: outcome,
                    detail: SupportAction.object(detail)))
        }
        return actions
    }
}

extension PostgresLedgerStore {
    /// The overview's queries in PostgreSQL's SQL: a payload's fields from its JSON bytes (a transaction kept raw, whose
    /// parts were not canonical base64url, has none: rare, and left out of the figures).
    static let overviewQueries = SupportOverview.Queries(
        json: { table, field, numeric in
            let text = "(convert_from(\(table).jws_payload, 'UTF8')::jsonb->>'\(field)')"
            return numeric ? "(\(text)::bigint)" : text
        }, parameter: { "$\($0)" })

    package func overview(_ app: VerifierKey, since: Date, now: Date) async throws(StorageError) -> SupportOverview {
        try await read { connection in
            var overview = SupportOverview(bundleId: app.bundleId, environment: app.environment, since: since, now: now)
            var binds = PostgresBindings()
            binds.append(app.bundleId)
            binds.append(app.environment.rawValue)
            binds.append(since.epochMilliseconds)
            binds.append(now.epochMilliseconds)
            for try await (productId, status, trial, expired, ended, count) in try await connection.run(
                PostgresQuery(unsafeSQL: Self.overviewQueries.subscriptions, binds: binds)
            ).decode((String, Int32?, Int32, Int32, Int32, Int64).self) {
                overview.add(
                    SupportOverview.SubscriptionGroup(
                        productId: productId, status: status.map(Int.init), freeTrial: trial == 1, expired: expired == 1, endedInWindow: ended == 1,
                        count: Int(count)))
            }
            for try await (renewal, purchaseDate, revokedAt, price, currency, afterTrial) in try await connection.run(
                PostgresQuery(unsafeSQL: Self.overviewQueries.window, binds: binds)
            ).decode((Int32, Int64, Int64?, Int64?, String?, Int32).self) {
                overview.add(
                    SupportOverview.WindowTransaction(
                        renewal: renewal == 1, purchaseDate: Date(epochMilliseconds: purchaseDate),
                        revocationDate: revokedAt.map(Date.init(epochMilliseconds:)), price: price, currency: currency,
                        afterFreeTrial: afterTrial == 1))
            }
            return overview
        }
    }
}
