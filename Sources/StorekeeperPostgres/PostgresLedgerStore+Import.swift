import AppStoreModels
import Foundation
import PostgresNIO
public import StorekeeperCore

/// A ledger copied in (``LedgerImporting``), page by page, each page in one transaction.
extension PostgresLedgerStore: LedgerImporting {
    public func isEmpty() async throws(StorageError) -> Bool {
        try await read { connection in
            var empty = true
            for try await found in try await connection.run("""
                SELECT EXISTS (SELECT 1 FROM notifications) OR EXISTS (SELECT 1 FROM transactions)
                    OR EXISTS (SELECT 1 FROM subscriptions) OR EXISTS (SELECT 1 FROM customer_links)
                    OR EXISTS (SELECT 1 FROM token_owners) OR EXISTS (SELECT 1 FROM refused_notifications)
                """).decode(Bool.self) { empty = !found }
            return empty
        }
    }

    public func importPage(_ page: LedgerPage) async throws(StorageError) {
        let _: Int = try await write { transaction in
            let connection = transaction.connection
            var changes = LedgerChanges(from: Ledger(), to: Ledger())
            changes.transactions = page.transactions
            changes.subscriptions = page.subscriptions
            changes.links = page.links
            changes.tokenOwners = page.tokenOwners
            try await self.save(connection, transaction.memo, changes, into: transaction.pending)
            try await transaction.flush()
            for notification in page.notifications {
                let payload = try await self.headers.store(notification.signedPayload, connection, transaction.memo)
                try await connection.execute("""
                    INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, received_at,
                        jws_header, jws_payload, jws_signature, jws_raw)
                    VALUES (\(notification.notificationUUID), \(notification.notificationType.rawValue), \(notification.subtype?.rawValue),
                        \(notification.signedDate?.epochMilliseconds), \(notification.environment?.rawValue), \(notification.outcome),
                        \(notification.receivedAt.epochMilliseconds), \(payload.header), \(payload.payload), \(payload.signature), \(payload.raw))
                    """)
            }
            for refusal in page.refused {
                let claims = try refusal.claims.map { String(decoding: try AppStoreJSON.makeEncoder().encode($0), as: UTF8.self) }
                try await connection.execute("""
                    INSERT INTO refused_notifications (received_at, code, message, status, size, sha256, prefix, claims)
                    VALUES (\(refusal.receivedAt.epochMilliseconds), \(refusal.code), \(refusal.message), \(refusal.status),
                        \(refusal.size), \(refusal.sha256), \(refusal.prefix), \(claims))
                    """)
            }
            for watermark in page.watermarks { try await transaction.setRecoveryWatermark(watermark) }
            return (0, [])
        }
    }
}
