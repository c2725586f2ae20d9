import AppStoreModels
import Foundation
import GRDB
package import StorekeeperCore

/// Promotional grants (``PromotionalGrant``): written by ``LedgerUnitOfWork/granting(_:)`` and
/// ``LedgerUnitOfWork/revoking(grant:of:at:keyName:reason:)``, read with the customer's ledger.
extension SQLiteLedgerStore {
    package func changeGrant(_ change: PromotionalGrantChange, audit: SupportAction) async throws(StorageError) -> PromotionalGrantOutcome {
        try await writeAnnouncing { db, memo in
            let outcome = try change.step.run(in: SQLiteWriteTransaction(store: self, db: db, memo: memo))
            let id = try Self.insert(audit.recording(outcome), db)
            guard case .done(let grant, _) = outcome else { return (outcome.recorded(as: id), []) }
            return (outcome.recorded(as: id), [grant.customerId])
        }
    }

    package func promotionalGrants(_ customer: CustomerKey) async throws(StorageError) -> [PromotionalGrant] {
        try await read { db in
            var ledger = Ledger()
            try Self.loadGrants(db, customer, into: &ledger)
            return ledger.grants.values.sorted { ($0.grantedAt, $0.id) < ($1.grantedAt, $1.id) }
        }
    }

    static func save(_ grant: PromotionalGrant, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO promotional_grants (id, bundle_id, environment, customer_id, entitlement, granted_at, expires_at, granted_by, reason,
                    revoked_at, revoked_by, revoke_reason)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET
                    revoked_at = excluded.revoked_at, revoked_by = excluded.revoked_by, revoke_reason = excluded.revoke_reason
                """
        ).execute(arguments: [
            grant.id, grant.bundleId, grant.environment.rawValue, grant.customerId, grant.entitlement, grant.grantedAt.epochMilliseconds,
            grant.expiresDate.epochMilliseconds, grant.grantedBy ?? "", grant.reason ?? "", grant.revokedAt?.epochMilliseconds, grant.revokedBy,
            grant.revokeReason,
        ])
    }

    /// The customer's grants in the app and environment (revoked and expired ones too) into `ledger`.
    static func loadGrants(_ db: Database, _ customer: CustomerKey, into ledger: inout Ledger) throws {
        let rows = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM promotional_grants WHERE customer_id = ? AND bundle_id = ? AND environment = ?"),
            arguments: [customer.customerId, customer.bundleId, customer.environment.rawValue])
        for row in rows {
            let grant = Self.grant(row)
            ledger.grants[grant.id] = grant
        }
    }

    static func grant(_ row: Row) -> PromotionalGrant {
        PromotionalGrant(
            id: row["id"],
            customer: CustomerKey(
                bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), customerId: row["customer_id"]),
            entitlement: row["entitlement"], grantedAt: Date(epochMilliseconds: row["granted_at"]),
            expiresDate: Date(epochMilliseconds: row["expires_at"]), grantedBy: row["granted_by"], reason: row["reason"],
            revokedAt: (row["revoked_at"] as Int64?).map(Date.init(epochMilliseconds:)), revokedBy: row["revoked_by"],
            revokeReason: row["revoke_reason"])
    }
}
