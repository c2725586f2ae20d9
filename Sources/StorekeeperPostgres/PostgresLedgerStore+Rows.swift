import AppStoreModels
import AppStoreSigning
import Foundation
import PostgresNIO
import Logging
import StorekeeperCore

/// Rows to ledger records. `memo` is the write transaction's (``PostgresHeaders/Memo``), `nil` in reads.
extension PostgresLedgerStore {
    /// Every transaction of one original transaction ID, its customer link and its subscription record.
    func loadFamily(_ connection: PostgresConnection, _ memo: PostgresHeaders.Memo?, _ key: LedgerKey, into ledger: inout Ledger) async throws {
        try await loadFamilies(connection, memo, [key], into: &ledger)
    }

    /// Every transaction, customer link and subscription record of these families, in four statements whatever their
    /// number. With `latestOnly`, an auto-renewable subscription gets only its latest transaction (by purchase date)
    /// and the tokens of the others (``Ledger/omittedTransactionTokens``), which is all the entitlement engine and the
    /// customer view use (``LedgerStore/entitlementLedger(for:bundleId:environment:)``); and no raw JWS is rebuilt
    /// (`signedData` false) when no answer needs it.
    func loadFamilies(
        _ connection: PostgresConnection, _ memo: PostgresHeaders.Memo?, _ keys: [LedgerKey], into ledger: inout Ledger,
        latestOnly: Bool = false, signedData: Bool = true
    ) async throws {
        for (environment, group) in Dictionary(grouping: keys, by: \.environment).sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            let ids = Array(Set(group.map(\.id))).sorted()
            typealias Row = (id: String, original: String, type: String, token: String?, signedDate: Int64, source: String, jws: PostgresHeaders.Columns)
            var rows: [Row] = []
            for try await (id, original, type, token, signedDate, source, header, payload, signature, raw) in try await connection.run("""
                SELECT transaction_id, original_transaction_id, product_type, app_account_token, signed_date, source,
                    jws_header, jws_payload, jws_signature, jws_raw
                FROM transactions WHERE environment = \(environment.rawValue) AND original_transaction_id = ANY(\(ids))
                ORDER BY original_transaction_id, purchase_date DESC, transaction_id DESC
                """).decode((String, String, String, String?, Int64, String, Int64?, Data?, Data?, String?).self) {
                rows.append((id, original, type, token, signedDate, source, .init(header: header, payload: payload, signature: signature, raw: raw)))
            }
            var subscriptions: [(row: LedgerSubscription, renewal: PostgresHeaders.Columns)] = []
            for try await (original, bundleId, status, statusDate, statusUUID, renewalDate, header, payload, signature, raw) in try await connection.run("""
                SELECT original_transaction_id, bundle_id, status, status_signed_date, status_notification_uuid, renewal_signed_date,
                    renewal_header, renewal_payload, renewal_signature, renewal_raw
                FROM subscriptions WHERE environment = \(environment.rawValue) AND original_transaction_id = ANY(\(ids))
                """).decode((String, String, Int?, Int64?, String?, Int64?, Int64?, Data?, Data?, String?).self) {
                var record = LedgerSubscription(key: LedgerKey(environment, original), bundleId: bundleId)
                record.status = status.map(SubscriptionStatus.init(rawValue:))
                record.statusSignedDate = statusDate.map(Date.init(epochMilliseconds:))
                record.statusNotificationUUID = statusUUID
                record.renewalSignedDate = renewalDate.map(Date.init(epochMilliseconds:))
                subscriptions.append((record, .init(header: header, payload: payload, signature: signature, raw: raw)))
            }
            for try await (original, customer) in try await connection.run("""
                SELECT original_transaction_id, customer_id FROM customer_links
                WHERE environment = \(environment.rawValue) AND original_transaction_id = ANY(\(ids))
                """).decode((String, String).self) { ledger.explicitLinks[LedgerKey(environment, original)] = customer }

            // Rows come latest first within each family: a subscription's first row is the one that decides.
            var kept: [Row] = []
            var latestOfFamily: [String: Bool] = [:]
            for row in rows {
                if latestOnly, let isSubscription = latestOfFamily[row.original] {
                    if isSubscription {
                        if let token = row.token.flatMap(LowercaseUUID.init(uuidString:)) {
                            ledger.omittedTransactionTokens[LedgerKey(environment, row.original), default: []].insert(token)
                        }
                        continue
                    }
                } else {
                    latestOfFamily[row.original] = row.type == ProductType.autoRenewable.rawValue
                }
                kept.append(row)
            }
            var references = Set<Int64>()
            for row in kept { references.formUnion(headers.references(row.jws)) }
            for subscription in subscriptions { references.formUnion(headers.references(subscription.renewal)) }
            try await headers.load(references, connection, memo)

            let decoder = AppStoreJSON.makeDecoder()
            for row in kept {
                guard let payload = try headers.payload(row.jws, memo), let jws = signedData ? try headers.jws(row.jws, memo) : "" else {
                    throw StorageError("transaction \(row.id) has no stored JWS")
                }
                ledger.transactions[LedgerKey(environment, row.id)] = LedgerTransaction(
                    info: try decoder.decode(TransactionInfo.self, from: payload),
                    signedDate: Date(epochMilliseconds: row.signedDate), source: row.source, jws: jws
                )
            }
            for subscription in subscriptions {
                var record = subscription.row
                if let payload = try headers.payload(subscription.renewal, memo) {
                    record.renewalInfo = try decoder.decode(RenewalInfo.self, from: payload)
                    if signedData { record.renewalJWS = try headers.jws(subscription.renewal, memo) }
                }
                ledger.subscriptions[record.key] = record
            }
        }
    }

    /// A customer's app account tokens in one app and environment (into `ledger`), and the original transaction IDs
    /// of everything linked to them or carrying one of those tokens, in two statements.
    func customerFamilies(
        _ connection: PostgresConnection, _ customerId: String, _ bundleId: String, _ environment: AppStoreEnvironment, into ledger: inout Ledger
    ) async throws -> (linked: Set<String>, byToken: Set<String>) {
        var byToken = Set<String>()
        for try await (token, original) in try await connection.run("""
            SELECT o.token, t.original_transaction_id FROM token_owners o
            LEFT JOIN transactions t ON t.app_account_token = o.token AND t.environment = o.environment
            WHERE o.customer_id = \(customerId) AND o.bundle_id = \(bundleId) AND o.environment = \(environment.rawValue)
            """).decode((String, String?).self) {
            if let uuid = LowercaseUUID(uuidString: token) {
                ledger.tokenOwners[AppAccountTokenKey(bundleId: bundleId, environment: environment, token: uuid)] = customerId
            }
            if let original { byToken.insert(original) }
        }
        var linked = Set<String>()
        for try await original in try await connection.run("""
            SELECT original_transaction_id FROM customer_links WHERE customer_id = \(customerId) AND environment = \(environment.rawValue)
            """).decode(String.self) { linked.insert(original) }
        return (linked, byToken)
    }
}

extension PostgresConnection {
    /// Runs one statement; its rows can be iterated or discarded. (The store logs its own failures, once, with
    /// context; postgres-nio's per-query logging stays off.)
    func run(_ query: PostgresQuery) async throws -> PostgresRowSequence {
        try await self.query(query, logger: Self.quiet)
    }

    /// Runs one statement and reads its result to the end, so that an error the server sends while executing it
    /// (a deadlock found while waiting for a lock, say) is thrown here, not lost with rows nobody reads.
    func execute(_ query: PostgresQuery) async throws {
        for try await _ in try await self.query(query, logger: Self.quiet) {}
    }

    static let quiet = Logger(label: "storekeeper.postgres.query", factory: { _ in SwiftLogNoOpLogHandler() })
}
