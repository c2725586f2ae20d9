import AppStoreModels
import AppStoreSigning
import Foundation
import GRDB
import StorekeeperCore

/// Rows to ledger records and back. `memo` is the write transaction's (``HeaderReferences/Memo``), `nil` in reads.
extension SQLiteLedgerStore {
    /// The owners of `tokens`, one cached statement per token (a statement built for the tokens at hand would be
    /// compiled on every write).
    func tokenOwners(_ db: Database, of tokens: Set<AppAccountTokenKey>) throws -> [AppAccountTokenKey: String] {
        var owners: [AppAccountTokenKey: String] = [:]
        for key in tokens {
            if let owner = try String.fetchOne(
                db.cachedStatement(sql: "SELECT customer_id FROM token_owners WHERE bundle_id = ? AND environment = ? AND token = ?"),
                arguments: [key.bundleId, key.environment.rawValue, key.token.description]
            ) {
                owners[key] = owner
            }
        }
        return owners
    }

    /// A customer's app account tokens in one app and environment, and the original transaction IDs of everything
    /// linked to them or carrying one of those tokens, through cached statements whatever the number of tokens.
    func customerFamilies(
        _ db: Database, _ customerId: String, _ bundleId: String, _ environment: AppStoreEnvironment
    ) throws -> (tokens: [AppAccountTokenKey], originals: Set<String>) {
        let tokens = try customerTokens(db, customerId, bundleId, environment)
        var originals = Set(
            try String.fetchAll(
                db.cachedStatement(sql: "SELECT original_transaction_id FROM customer_links WHERE customer_id = ? AND environment = ?"),
                arguments: [customerId, environment.rawValue]
            ))
        for token in tokens {
            originals.formUnion(
                try String.fetchAll(
                    db.cachedStatement(sql: Self.familiesByTokenSQL), arguments: [token.token.description, environment.rawValue]
                ))
        }
        return (tokens, originals)
    }

    /// The app account tokens a customer owns in one app and environment.
    func customerTokens(_ db: Database, _ customerId: String, _ bundleId: String, _ environment: AppStoreEnvironment) throws -> [AppAccountTokenKey] {
        try String.fetchAll(
            db.cachedStatement(sql: "SELECT token FROM token_owners WHERE customer_id = ? AND bundle_id = ? AND environment = ?"),
            arguments: [customerId, bundleId, environment.rawValue]
        ).compactMap { text in
            LowercaseUUID(uuidString: text).map { AppAccountTokenKey(bundleId: bundleId, environment: environment, token: $0) }
        }
    }

    /// The transactions of one family (environment `?1`, original transaction ID `?2`), latest first, with what
    /// picks the ones to decode.
    static let familyOrderSQL = """
        SELECT transaction_id, product_type, app_account_token FROM transactions
        WHERE environment = ?1 AND original_transaction_id = ?2
        ORDER BY purchase_date DESC, transaction_id DESC
        """

    /// The original transaction IDs of the transactions carrying app account token `?1` in environment `?2` (in any
    /// app: a token is scoped by app through its owner, and other apps' purchases are left out by the reader).
    static let familiesByTokenSQL = "SELECT original_transaction_id FROM transactions WHERE app_account_token = ?1 AND environment = ?2"

    /// Every transaction of one original transaction ID, its customer link and its subscription record.
    func loadSubscriptionFamily(_ db: Database, _ memo: HeaderReferences.Memo?, _ key: LedgerKey, into ledger: inout Ledger) throws {
        let decoder = AppStoreJSON.makeDecoder()
        try loadRows(db, memo, key, into: &ledger, decoder: decoder)
        try loadLink(db, key, into: &ledger)
        try loadSubscription(db, memo, key, into: &ledger, decoder: decoder)
    }

    /// Every transaction of one original transaction ID, decoded (with its raw JWS unless `signedData` is false).
    func loadRows(
        _ db: Database, _ memo: HeaderReferences.Memo?, _ key: LedgerKey, into ledger: inout Ledger, decoder: JSONDecoder, signedData: Bool = true
    ) throws {
        let rows = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM transactions WHERE environment = ? AND original_transaction_id = ?"),
            arguments: [key.environment.rawValue, key.id]
        )
        for row in rows {
            ledger.transactions[LedgerKey(key.environment, row["transaction_id"])] = try transaction(
                row, db, memo, decoder: decoder, signedData: signedData
            )
        }
    }

    /// The customer an original transaction ID is explicitly linked to, if any.
    func loadLink(_ db: Database, _ key: LedgerKey, into ledger: inout Ledger) throws {
        if let customer = try String.fetchOne(
            db.cachedStatement(sql: "SELECT customer_id FROM customer_links WHERE environment = ? AND original_transaction_id = ?"),
            arguments: [key.environment.rawValue, key.id]
        ) {
            ledger.explicitLinks[key] = customer
        }
    }

    /// A `transactions` row as the ledger keeps it: the transaction decoded from the stored JWS payload, and the JWS
    /// (left empty when `signedData` is false: reads that only answer a customer never look at it, and putting the
    /// kilobytes back together would be a large part of a read's time).
    func transaction(
        _ row: Row, _ db: Database, _ memo: HeaderReferences.Memo?, decoder: JSONDecoder, signedData: Bool = true
    ) throws -> LedgerTransaction {
        guard let payload = try headers.payload(row, "jws", db, memo),
            let jws = signedData ? try headers.jws(row, "jws", db, memo) : ""
        else {
            throw StorageError("transaction \(row["transaction_id"] as String? ?? "?") has no stored JWS")
        }
        return LedgerTransaction(
            info: try TransactionInfo(json: payload, fallback: decoder),
            signedDate: Date(epochMilliseconds: row["signed_date"]), source: row["source"], jws: jws
        )
    }

    /// The subscription record of one original transaction ID (its renewal info's raw JWS unless `signedData` is false).
    func loadSubscription(
        _ db: Database, _ memo: HeaderReferences.Memo?, _ key: LedgerKey, into ledger: inout Ledger, decoder: JSONDecoder, signedData: Bool = true
    ) throws {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT * FROM subscriptions WHERE environment = ? AND original_transaction_id = ?"),
                arguments: [key.environment.rawValue, key.id]
            )
        else { return }
        var subscription = LedgerSubscription(key: key, bundleId: row["bundle_id"])
        subscription.status = (row["status"] as Int?).map(SubscriptionStatus.init(rawValue:))
        subscription.statusSignedDate = (row["status_signed_date"] as Int64?).map(Date.init(epochMilliseconds:))
        subscription.statusNotificationUUID = row["status_notification_uuid"]
        if let payload = try headers.payload(row, "renewal", db, memo) {
            subscription.renewalInfo = try RenewalInfo(json: payload, fallback: decoder)
            if signedData { subscription.renewalJWS = try headers.jws(row, "renewal", db, memo) }
        }
        subscription.renewalSignedDate = (row["renewal_signed_date"] as Int64?).map(Date.init(epochMilliseconds:))
        ledger.subscriptions[key] = subscription
    }

    /// Writes what a unit of work changed, and the notification received.
    func save(_ db: Database, _ memo: HeaderReferences.Memo, _ changes: LedgerChanges) throws {
        for grant in changes.grants { try Self.save(grant, db) }
        for transaction in changes.transactions {
            guard let environment = transaction.info.environment else { continue }
            let jws = try headers.store(transaction.jws, db, memo)
            try db.cachedStatement(
                sql: """
                    INSERT INTO transactions (environment, transaction_id, original_transaction_id, product_id,
                        app_account_token, signed_date, source, purchase_date, product_type, bundle_id, quantity, revoked,
                        jws_header, jws_payload, jws_signature, jws_raw)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (environment, transaction_id) DO UPDATE SET
                        original_transaction_id = excluded.original_transaction_id, product_id = excluded.product_id,
                        app_account_token = excluded.app_account_token, signed_date = excluded.signed_date,
                        source = excluded.source, purchase_date = excluded.purchase_date, product_type = excluded.product_type,
                        bundle_id = excluded.bundle_id, quantity = excluded.quantity, revoked = excluded.revoked,
                        jws_header = excluded.jws_header, jws_payload = excluded.jws_payload,
                        jws_signature = excluded.jws_signature, jws_raw = excluded.jws_raw
                    """
            ).execute(
                arguments: [
                    environment.rawValue, transaction.info.transactionId, transaction.info.originalTransactionId, transaction.info.productId,
                    transaction.info.appAccountToken?.description, transaction.signedDate.epochMilliseconds, transaction.source,
                    transaction.info.purchaseDate.epochMilliseconds, transaction.info.type.rawValue,
                    transaction.info.bundleId, transaction.info.quantity ?? 1, transaction.info.revocationDate != nil,
                ] + jws.arguments)
        }
        for subscription in changes.subscriptions {
            let key = subscription.key
            let renewal = try headers.store(subscription.renewalJWS, db, memo)
            try db.cachedStatement(
                sql: """
                    INSERT INTO subscriptions (environment, original_transaction_id, bundle_id, status, status_signed_date,
                        status_notification_uuid, renewal_signed_date, renewal_header, renewal_payload, renewal_signature, renewal_raw)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                        bundle_id = excluded.bundle_id, status = excluded.status, status_signed_date = excluded.status_signed_date,
                        status_notification_uuid = excluded.status_notification_uuid,
                        renewal_signed_date = excluded.renewal_signed_date, renewal_header = excluded.renewal_header,
                        renewal_payload = excluded.renewal_payload, renewal_signature = excluded.renewal_signature,
                        renewal_raw = excluded.renewal_raw
                    """
            ).execute(
                arguments: [
                    key.environment.rawValue, key.id, subscription.bundleId, subscription.status?.rawValue,
                    subscription.statusSignedDate?.epochMilliseconds, subscription.statusNotificationUUID,
                    subscription.renewalSignedDate?.epochMilliseconds,
                ] + renewal.arguments)
        }
        for (key, customer) in changes.links.sorted(by: { $0.key < $1.key }) {
            try db.cachedStatement(
                sql: """
                    INSERT INTO customer_links (environment, original_transaction_id, customer_id) VALUES (?, ?, ?)
                    ON CONFLICT (environment, original_transaction_id) DO UPDATE SET customer_id = excluded.customer_id
                    """
            ).execute(arguments: [key.environment.rawValue, key.id, customer])
        }
        for (token, customer) in changes.tokenOwners.sorted(by: { $0.key < $1.key }) {
            try db.cachedStatement(
                sql: """
                    INSERT INTO token_owners (bundle_id, environment, token, customer_id) VALUES (?, ?, ?, ?)
                    ON CONFLICT (bundle_id, environment, token) DO UPDATE SET customer_id = excluded.customer_id
                    """
            ).execute(arguments: [token.bundleId, token.environment.rawValue, token.token.description, customer])
        }
        for record in changes.notifications {
            let payload = try headers.store(record.signedPayload, db, memo)
            try db.cachedStatement(
                sql: """
                    INSERT INTO notifications (uuid, type, subtype, signed_date, environment, outcome, received_at,
                        jws_header, jws_payload, jws_signature, jws_raw)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(
                arguments: [
                    record.notificationUUID, record.notificationType.rawValue, record.subtype?.rawValue,
                    record.signedDate?.epochMilliseconds, record.environment?.rawValue, record.outcome, Date().epochMilliseconds,
                ] + payload.arguments)
        }
    }
}

/// The SQLite side of one ``LedgerUnitOfWork``: its row operations inside a GRDB write transaction. The fault
/// injection points of the tests are here, in a notification's write: `after-apply` (the rules ran, nothing written)
/// and `before-commit` (everything written, not committed).
struct SQLiteWriteTransaction: LedgerWriteTransaction {
    let store: SQLiteLedgerStore
    let db: Database
    let memo: HeaderReferences.Memo

    var outboxEnabled: Bool { store.outbox.isEnabled }

    func notificationExists(_ uuid: String) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM notifications WHERE uuid = ?"), arguments: [uuid]) == true
    }

    func loadFamily(_ key: LedgerKey, into ledger: inout Ledger) throws {
        try store.loadSubscriptionFamily(db, memo, key, into: &ledger)
    }

    func tokenOwners(of tokens: Set<AppAccountTokenKey>) throws -> [AppAccountTokenKey: String] {
        try store.tokenOwners(db, of: tokens)
    }

    func erasedTokens(among tokens: Set<AppAccountTokenKey>) throws -> Set<AppAccountTokenKey> {
        try tokens.filter { key in
            try Bool.fetchOne(
                db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM erased_tokens WHERE bundle_id = ? AND environment = ? AND token = ?)"),
                arguments: [key.bundleId, key.environment.rawValue, key.token.description]) ?? false
        }
    }

    func setRecoveryWatermark(_ watermark: RecoveryWatermark) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO recovery_watermarks (bundle_id, environment, watermark) VALUES (?, ?, ?)
                ON CONFLICT (bundle_id, environment) DO UPDATE SET watermark = excluded.watermark
                """
        ).execute(arguments: [watermark.app.bundleId, watermark.app.environment.rawValue, watermark.date.epochMilliseconds])
        try store.unsafeFaultInjection?("after-watermark")
    }

    func write(_ changes: LedgerChanges) throws {
        let faults = changes.notifications.isEmpty ? nil : store.unsafeFaultInjection
        for record in changes.notifications { try faults?("notification \(record.notificationUUID)") }
        try faults?("after-apply")
        try store.save(db, memo, changes)
        try faults?("before-commit")
    }
}

/// Stored as its raw value (`applied`, `recorded`) in `notifications.outcome`.
extension ApplyOutcome: DatabaseValueConvertible {}
