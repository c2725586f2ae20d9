import AppStoreModels
package import Foundation
import GRDB
package import StorekeeperCore

/// Consumption requests and consents (schema v13): the ledger's trigger creates a request's row with its
/// notification's; the responder job claims, decides and answers it.
extension SQLiteLedgerStore {
    package func claimConsumptionRequests(
        now: Date, holder: String, until: Date, limit: Int
    ) async throws(StorageError) -> [ConsumptionRequestRecord] {
        try await write { db, _ in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        UPDATE consumption_requests SET claimed_by = ?2, claimed_until = ?3
                        WHERE uuid IN (
                            SELECT uuid FROM consumption_requests
                            WHERE state IN ('new', 'pending', 'manual')
                                AND (state = 'new' OR (state = 'pending' AND next_attempt_at <= ?1) OR deadline <= ?1)
                                AND (claimed_until IS NULL OR claimed_until <= ?1)
                            ORDER BY received_at LIMIT ?4)
                        RETURNING *
                        """),
                arguments: [now.epochMilliseconds, holder, until.epochMilliseconds, limit]
            ).map(Self.consumptionRequest)
        }
    }

    package func saveConsumptionRequest(_ record: ConsumptionRequestRecord, holder: String) async throws(StorageError) -> Bool {
        try await write { db, _ in
            try db.cachedStatement(
                sql: """
                    UPDATE consumption_requests SET state = ?, bundle_id = ?, environment = ?, transaction_id = ?,
                        original_transaction_id = ?, customer_id = ?, product_id = ?, product_type = ?, reason = ?, requested_at = ?,
                        deadline = ?, decided_by = ?, facts = ?, answer = ?, attempts = ?, next_attempt_at = ?, last_error = ?,
                        finished_at = ?, claimed_by = NULL, claimed_until = NULL
                    WHERE uuid = ? AND claimed_by = ?
                    """
            ).execute(arguments: StatementArguments(Self.columns(of: record) + [record.notificationUUID, holder]))
            return db.changesCount == 1
        }
    }

    package func answerConsumptionRequest(
        _ uuid: String, answer: ConsumptionAnswer, decidedBy: String, at: Date
    ) async throws(StorageError) -> ConsumptionRequestRecord? {
        try await write { db, _ in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        UPDATE consumption_requests SET state = 'pending', answer = ?, decided_by = ?, next_attempt_at = ?
                        WHERE uuid = ? AND state = 'manual' AND deadline > ?3 RETURNING *
                        """),
                arguments: [ConsumptionRequestRecord.text(answer), decidedBy, at.epochMilliseconds, uuid]
            ).map(Self.consumptionRequest)
        }
    }

    package func consumptionRequest(_ uuid: String) async throws(StorageError) -> ConsumptionRequestRecord? {
        try await read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM consumption_requests WHERE uuid = ?"), arguments: [uuid])
                .map(Self.consumptionRequest)
        }
    }

    package func consumptionRequests(_ query: ConsumptionRequestQuery) async throws(StorageError) -> [ConsumptionRequestRecord] {
        try await read { db in
            switch query {
            case .customer(let customer):
                return try Row.fetchAll(
                    db.cachedStatement(
                        sql: """
                            SELECT * FROM consumption_requests WHERE bundle_id = ? AND environment = ? AND customer_id = ?
                            ORDER BY received_at DESC LIMIT 500
                            """),
                    arguments: [customer.bundleId, customer.environment.rawValue, customer.customerId]
                ).map(Self.consumptionRequest)
            case .apps(let apps, let states, let limit):
                var found: [ConsumptionRequestRecord] = []
                let wanted = states.isEmpty ? ConsumptionRequestRecord.State.allCases : states
                for app in apps {
                    found += try Row.fetchAll(
                        db,
                        sql: """
                            SELECT * FROM consumption_requests WHERE bundle_id = ? AND environment = ?
                                AND state IN (\(wanted.map { _ in "?" }.joined(separator: ", ")))
                            ORDER BY deadline LIMIT ?
                            """,
                        arguments: StatementArguments([app.bundleId, app.environment.rawValue] + wanted.map(\.rawValue) + [limit])
                    ).map(Self.consumptionRequest)
                }
                return Array(found.sorted(by: ConsumptionRequestRecord.byDeadline).prefix(limit))
            }
        }
    }

    package func setConsumptionConsent(_ consent: ConsumptionConsent, for customer: CustomerKey) async throws(StorageError) {
        try await write { db, _ in
            try db.cachedStatement(
                sql: """
                    INSERT INTO consumption_consents (bundle_id, environment, customer_id, consented, at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (bundle_id, environment, customer_id) DO UPDATE SET consented = excluded.consented, at = excluded.at
                    """
            ).execute(arguments: [
                customer.bundleId, customer.environment.rawValue, customer.customerId, consent.consented, consent.at.epochMilliseconds,
            ])
        }
    }

    package func consumptionConsent(_ customer: CustomerKey) async throws(StorageError) -> ConsumptionConsent? {
        try await read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT consented, at FROM consumption_consents WHERE bundle_id = ? AND environment = ? AND customer_id = ?"),
                arguments: [customer.bundleId, customer.environment.rawValue, customer.customerId]
            ).map { ConsumptionConsent(consented: $0["consented"], at: Date(epochMilliseconds: $0["at"])) }
        }
    }

    /// The values of every column ``saveConsumptionRequest(_:holder:)`` writes, in its order (and the import's).
    static func columns(of record: ConsumptionRequestRecord) -> [(any DatabaseValueConvertible)?] {
        [
            record.state.rawValue, record.bundleId, record.environment?.rawValue, record.transactionId, record.originalTransactionId,
            record.customerId, record.productId, record.productType?.rawValue, record.reason?.rawValue, record.requestedAt?.epochMilliseconds,
            record.deadline?.epochMilliseconds, record.decidedBy, ConsumptionRequestRecord.text(record.facts),
            ConsumptionRequestRecord.text(record.answer), record.attempts, record.nextAttemptAt?.epochMilliseconds, record.lastError,
            record.finishedAt?.epochMilliseconds,
        ]
    }

    static func consumptionRequest(_ row: Row) -> ConsumptionRequestRecord {
        func date(_ column: String) -> Date? { (row[column] as Int64?).map(Date.init(epochMilliseconds:)) }
        var record = ConsumptionRequestRecord(
            notificationUUID: row["uuid"], receivedAt: Date(epochMilliseconds: row["received_at"]),
            state: ConsumptionRequestRecord.State(rawValue: row["state"]) ?? .failed)
        record.bundleId = row["bundle_id"]
        record.environment = (row["environment"] as String?).map(AppStoreEnvironment.init(rawValue:))
        record.transactionId = row["transaction_id"]
        record.originalTransactionId = row["original_transaction_id"]
        record.customerId = row["customer_id"]
        record.productId = row["product_id"]
        record.productType = (row["product_type"] as String?).map(ProductType.init(rawValue:))
        record.reason = (row["reason"] as String?).map(ConsumptionRequestReason.init(rawValue:))
        record.requestedAt = date("requested_at")
        record.deadline = date("deadline")
        record.decidedBy = row["decided_by"]
        record.facts = ConsumptionRequestRecord.value(row["facts"], as: ConsumptionFacts.self)
        record.answer = ConsumptionRequestRecord.value(row["answer"], as: ConsumptionAnswer.self)
        record.attempts = row["attempts"]
        record.nextAttemptAt = date("next_attempt_at")
        record.lastError = row["last_error"]
        record.finishedAt = date("finished_at")
        return record
    }
}
