import AppStoreModels
import Foundation
import PostgresNIO
package import StorekeeperCore

/// Promotional grants (``PromotionalGrant``): written by ``LedgerUnitOfWork/granting(_:)`` and
/// ``LedgerUnitOfWork/revoking(grant:of:at:keyName:reason:)`` under the customer's outbox lock (two instances revoking
/// one grant: one revokes it, the other finds it revoked), read with the customer's ledger (rows of kind 5).
extension PostgresLedgerStore {
    package func changeGrant(_ change: PromotionalGrantChange, audit: SupportAction) async throws(StorageError) -> PromotionalGrantOutcome {
        try await write { transaction in
            let outcome = try await change.step.run(in: transaction)
            try await transaction.flush()
            let id = try await Self.insert(audit.recording(outcome), transaction.connection)
            guard case .done(let grant, _) = outcome else { return (outcome.recorded(as: id), []) }
            return (outcome.recorded(as: id), [grant.customerId])
        }
    }

    package func promotionalGrants(_ customer: CustomerKey) async throws(StorageError) -> [PromotionalGrant] {
        try await read { connection in
            var grants: [PromotionalGrant] = []
            let rows = try await connection.run(
                """
                SELECT id, entitlement, granted_at, expires_at, granted_by, reason, revoked_at, revoked_by, revoke_reason FROM promotional_grants
                WHERE customer_id = \(customer.customerId) AND bundle_id = \(customer.bundleId) AND environment = \(customer.environment.rawValue)
                ORDER BY granted_at, id
                """)
            for try await (id, entitlement, grantedAt, expiresAt, grantedBy, reason, revokedAt, revokedBy, revokeReason) in rows.decode(
                (String, String, Int64, Int64, String, String, Int64?, String?, String?).self)
            {
                grants.append(
                    PromotionalGrant(
                        id: id, customer: customer, entitlement: entitlement, grantedAt: Date(epochMilliseconds: grantedAt),
                        expiresDate: Date(epochMilliseconds: expiresAt), grantedBy: grantedBy, reason: reason,
                        revokedAt: revokedAt.map(Date.init(epochMilliseconds:)), revokedBy: revokedBy, revokeReason: revokeReason))
            }
            return grants
        }
    }

    static func save(_ grant: PromotionalGrant, _ connection: PostgresConnection) async throws {
        try await connection.execute(
            """
            INSERT INTO promotional_grants (id, bundle_id, environment, customer_id, entitlement, granted_at, expires_at, granted_by, reason,
                revoked_at, revoked_by, revoke_reason)
            VALUES (\(grant.id), \(grant.bundleId), \(grant.environment.rawValue), \(grant.customerId), \(grant.entitlement),
                \(grant.grantedAt.epochMilliseconds), \(grant.expiresDate.epochMilliseconds), \(grant.grantedBy ?? ""), \(grant.reason ?? ""),
                \(grant.revokedAt?.epochMilliseconds), \(grant.revokedBy), \(grant.revokeReason))
            ON CONFLICT (id) DO UPDATE SET
                revoked_at = excluded.revoked_at, revoked_by = excluded.revoked_by, revoke_reason = excluded.revoke_reason
            """)
    }
}
