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
            return (0, [])
        }
    }
}
