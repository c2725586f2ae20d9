import AppStoreModels
package import Foundation
import PostgresNIO
package import StorekeeperCore

/// Consumption requests and consents (schema v7), as SQLite's: the trigger creates a request's row with its
/// notification's; the responder job claims (`FOR UPDATE SKIP LOCKED`: instances never claim one twice), decides and
/// answers it.
extension PostgresLedgerStore {
    static let consumptionColumns = """
        uuid, received_at, state, bundle_id, environment, transaction_id, original_transaction_id, customer_id, product_id,
        product_type, reason, requested_at, deadline, decided_by, facts, answer, attempts, next_attempt_at, last_error, finished_at
        """

    package func claimConsumptionRequests(
        now: Date, holder: String, until: Date, limit: Int
    ) async throws(StorageError) -> [ConsumptionRequestRecord] {
        let now = now.epochMilliseconds
        return try await write { transaction in
            let rows = try await transaction.connection.run(
                """
                UPDATE consumption_requests SET claimed_by = \(holder), claimed_until = \(until.epochMilliseconds)
                WHERE uuid IN (
                    SELECT uuid FROM consumption_requests
                    WHERE state IN ('new', 'pending', 'manual')
                        AND (state = 'new' OR (state = 'pending' AND next_attempt_at <= \(now)) OR deadline <= \(now))
                        AND (claimed_until IS NULL OR claimed_until <= \(now))
                    ORDER BY received_at LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING \(unescaped: Self.consumptionColumns)
                """)
            return (try await Self.consumptionRequests(rows), [])
        }
    }

    package func saveConsumptionRequest(_ record: ConsumptionRequestRecord, holder: String) async throws(StorageError) -> Bool {
        try await write { transaction in
            var saved = false
            for try await _ in try await transaction.connection.run(
                """
                UPDATE consumption_requests SET state = \(record.state.rawValue), bundle_id = \(record.bundleId),
                    environment = \(record.environment?.rawValue), transaction_id = \(record.transactionId),
                    original_transaction_id = \(record.originalTransactionId), customer_id = \(record.customerId),
                    product_id = \(record.productId), product_type = \(record.productType?.rawValue), reason = \(record.reason?.rawValue),
                    requested_at = \(record.requestedAt?.epochMilliseconds), deadline = \(record.deadline?.epochMilliseconds),
                    decided_by = \(record.decidedBy), facts = \(ConsumptionRequestRecord.text(record.facts)),
                    answer = \(ConsumptionRequestRecord.text(record.answer)), attempts = \(record.attempts),
                    next_attempt_at = \(record.nextAttemptAt?.epochMilliseconds), last_error = \(record.lastError),
                    finished_at = \(record.finishedAt?.epochMilliseconds), claimed_by = NULL, claimed_until = NULL
                WHERE uuid = \(record.notificationUUID) AND claimed_by = \(holder) RETURNING 1
                """
            ).decode(Int.self) { saved = true }
            return (saved, [])
        }
    }

    package func answerConsumptionRequest(
        _ uuid: String, answer: ConsumptionAnswer, decidedBy: String, at: Date
    ) async throws(StorageError) -> ConsumptionRequestRecord? {
        try await write { transaction in
            let rows = try await transaction.connection.run(
                """
                UPDATE consumption_requests SET state = 'pending', answer = \(ConsumptionRequestRecord.text(answer)), decided_by = \(decidedBy),
                    next_attempt_at = \(at.epochMilliseconds)
                WHERE uuid = \(uuid) AND state = 'manual' AND deadline > \(at.epochMilliseconds)
                RETURNING \(unescaped: Self.consumptionColumns)
                """)
            return (try await Self.consumptionRequests(rows).first, [])
        }
    }

    package func consumptionRequest(_ uuid: String) async throws(StorageError) -> ConsumptionRequestRecord? {
        try await read { connection in
            try await Self.consumptionRequests(
                connection.run("SELECT \(unescaped: Self.consumptionColumns) FROM consumption_requests WHERE uuid = \(uuid)")
            ).first
        }
    }

    package func consumptionRequests(_ query: ConsumptionRequestQuery) async throws(StorageError) -> [ConsumptionRequestRecord] {
        try await read { connection in
            switch query {
            case .customer(let customer):
                return try await Self.consumptionRequests(
                    connection.run(
                        """
                        SELECT \(unescaped: Self.consumptionColumns) FROM consumption_requests
                        WHERE bundle_id = \(customer.bundleId) AND environment = \(customer.environment.rawValue)
                            AND customer_id = \(customer.customerId)
                        ORDER BY received_at DESC LIMIT 500
                        """))
            case .apps(let apps, let states, let limit):
                let wanted = (states.isEmpty ? ConsumptionRequestRecord.State.allCases : states).map(\.rawValue)
                var found: [ConsumptionRequestRecord] = []
                for app in apps {
                    found += try await Self.consumptionRequests(
                        connection.run(
                            """
                            SELECT \(unescaped: Self.consumptionColumns) FROM consumption_requests
                            WHERE bundle_id = \(app.bundleId) AND environment = \(app.environment.rawValue) AND state = ANY(\(wanted))
                            ORDER BY deadline LIMIT \(limit)
                            """))
                }
                return Array(found.sorted(by: ConsumptionRequestRecord.byDeadline).prefix(limit))
            }
        }
    }

    package func setConsumptionConsent(_ consent: ConsumptionConsent, for customer: CustomerKey) async throws(StorageError) {
        try await write { transaction in
            try await transaction.connection.execute(
                """
                INSERT INTO consumption_consents (bundle_id, environment, customer_id, consented, at)
                VALUES (\(customer.bundleId), \(customer.environment.rawValue), \(customer.customerId), \(consent.consented),
                    \(consent.at.epochMilliseconds))
                ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE SET consented = excluded.consented, at = excluded.at
                """
            )
            return ((), [])
        }
    }

    package func consumptionConsent(_ customer: CustomerKey) async throws(StorageError) -> ConsumptionConsent? {
        try await read { connection in
            var consent: ConsumptionConsent?
            for try await (consented, at) in try await connection.run(
                """
                SELECT consented, at FROM consumption_consents
                WHERE bundle_id = \(customer.bundleId) AND environment = \(customer.environment.rawValue) AND customer_id = \(customer.customerId)
                """
            ).decode((Bool, Int64).self) { consent = ConsumptionConsent(consented: consented, at: Date(epochMilliseconds: at)) }
            return consent
        }
    }

    /// Rows of ``consumptionColumns``, read by name.
    static func consumptionRequests(_ rows: PostgresRowSequence) async throws -> [ConsumptionRequestRecord] {
        var records: [ConsumptionRequestRecord] = []
        for try await row in rows {
            let columns = row.makeRandomAccess()
            func text(_ name: String) throws -> String? { try columns[name].decode(String?.self) }
            func date(_ name: String) throws -> Date? { try columns[name].decode(Int64?.self).map(Date.init(epochMilliseconds:)) }
            var record = ConsumptionRequestRecord(
                notificationUUID: try columns["uuid"].decode(String.self), receivedAt: try date("received_at") ?? Date(epochMilliseconds: 0),
                state: ConsumptionRequestRecord.State(rawValue: try columns["state"].decode(String.self)) ?? .failed)
            record.bundleId = try text("bundle_id")
            record.environment = try text("environment").map(AppStoreEnvironment.init(rawValue:))
            record.transactionId = try text("transaction_id")
            record.originalTransactionId = try text("original_transaction_id")
            record.customerId = try text("customer_id")
            record.productId = try text("product_id")
            record.productType = try text("product_type").map(ProductType.init(rawValue:))
            record.reason = try text("reason").map(ConsumptionRequestReason.init(rawValue:))
            record.requestedAt = try date("requested_at")
            record.deadline = try date("deadline")
            record.decidedBy = try text("decided_by")
            record.facts = ConsumptionRequestRecord.value(try text("facts"), as: ConsumptionFacts.self)
            record.answer = ConsumptionRequestRecord.value(try text("answer"), as: ConsumptionAnswer.self)
            record.attempts = Int(try columns["attempts"].decode(Int32.self))
            record.nextAttemptAt = try date("next_attempt_at")
            record.lastError = try text("last_error")
            record.finishedAt = try date("finished_at")
            records.append(record)
        }
        return records
    }
}
