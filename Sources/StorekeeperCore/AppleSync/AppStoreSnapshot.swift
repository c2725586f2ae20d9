package import AppStoreModels
package import AppStoreServerAPI
package import AppStoreSigning
import Foundation

/// What the App Store Server API says of some purchases right now, verified: transactions (Get Transaction History)
/// and subscriptions' statuses with their latest transaction and renewal info (Get All Subscription Statuses). What
/// reconciliation compares the ledger with, and applies under the ledger's rules.
package struct AppStoreSnapshot: Sendable {
    /// One subscription's status, as Get All Subscription Statuses gives it.
    package struct Subscription: Sendable {
        package var status: SubscriptionStatus
        package var transaction: VerifiedSignedData<TransactionInfo>
        package var renewalInfo: VerifiedSignedData<RenewalInfo>

        package init(status: SubscriptionStatus, transaction: VerifiedSignedData<TransactionInfo>, renewalInfo: VerifiedSignedData<RenewalInfo>) {
            self.status = status
            self.transaction = transaction
            self.renewalInfo = renewalInfo
        }
    }

    package var transactions: [VerifiedSignedData<TransactionInfo>] = []
    package var subscriptions: [Subscription] = []

    package init(transactions: [VerifiedSignedData<TransactionInfo>] = [], subscriptions: [Subscription] = []) {
        self.transactions = transactions
        self.subscriptions = subscriptions
    }

    /// What the App Store says of the Apple account of `transactionId` (any of its transaction IDs): Get All
    /// Subscription Statuses, and Get Transaction History, every page, all verified; and the calls made.
    package static func fetch(
        account transactionId: String, client: AppStoreServerAPIClient, verifier: SignedDataVerifier
    ) async throws(AppStoreServerAPIError) -> (snapshot: AppStoreSnapshot, requests: Int) {
        var requests = 0
        var snapshot = AppStoreSnapshot()
        let statuses = try await client.subscriptionStatuses(transactionId, verifier: verifier)
        requests += 1
        snapshot.subscriptions = statuses.map { .init(status: $0.status, transaction: $0.transaction, renewalInfo: $0.renewalInfo) }
        let pages = try client.transactions(transactionId, verifier: verifier)
        var token: String? = nil
        repeat {
            let (page, next) = try await pages.page(after: token)
            requests += 1
            snapshot.transactions += page
            token = next
        } while token != nil
        return (snapshot, requests)
    }

    /// The families (environment and original transaction ID) the snapshot speaks of.
    package var families: Set<LedgerKey> {
        var keys = Set<LedgerKey>()
        for info in transactions.map(\.payload) + subscriptions.map(\.transaction.payload) {
            if let environment = info.environment { keys.insert(LedgerKey(environment, info.originalTransactionId)) }
        }
        return keys
    }
}

extension Ledger {
    /// Applies what the App Store Server API says, under the ledger's rules (each record replaced only by a version
    /// signed later; statuses by the renewal info's signing date).
    package mutating func apply(_ snapshot: AppStoreSnapshot) {
        for verified in snapshot.transactions { apply(verified.payload, jws: verified.jws, source: Ledger.apiSource) }
        for item in snapshot.subscriptions {
            apply(item.transaction.payload, jws: item.transaction.jws, source: Ledger.apiSource)
            apply(item.renewalInfo.payload, jws: item.renewalInfo.jws, bundleId: item.transaction.payload.bundleId)
            apply(status: item.status, of: item.transaction.payload, signedDate: item.renewalInfo.payload.signedDate, source: Ledger.apiSource)
        }
    }
}

/// A difference between the ledger and the App Store, field by field.
package struct Drift: Codable, Hashable, Sendable, CustomStringConvertible {
    package struct Kind: RawRepresentable, Codable, Hashable, Sendable {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }

        /// The App Store has a transaction the ledger lacks (a lost notification, a purchase never submitted).
        package static let missingTransaction = Kind(rawValue: "missing-transaction")
        /// The ledger's version of a transaction differs from the App Store's in a field.
        package static let staleTransaction = Kind(rawValue: "stale-transaction")
        /// The App Store revoked (refunded) a transaction the ledger still holds as valid.
        package static let revoked = Kind(rawValue: "revoked")
        /// A subscription's status differs.
        package static let staleStatus = Kind(rawValue: "stale-status")
        /// The ledger has no renewal info for a subscription.
        package static let missingRenewalInfo = Kind(rawValue: "missing-renewal-info")
        /// The ledger's renewal info differs from the App Store's in a field.
        package static let staleRenewalInfo = Kind(rawValue: "stale-renewal-info")
    }

    package var kind: Kind
    package var originalTransactionId: String
    package var transactionId: String?
    /// The field that differs, for stale records.
    package var field: String?
    package var ledger: String?
    package var appStore: String?

    package var description: String {
        var text = "\(kind.rawValue) \(originalTransactionId)"
        if let transactionId, transactionId != originalTransactionId { text += "/\(transactionId)" }
        if let field { text += " \(field): \(ledger ?? "none") → \(appStore ?? "none")" }
        return text
    }

    /// What differs between what the ledger holds of the snapshot's families and the snapshot: what applying the
    /// snapshot under the ledger's rules would change (so an API answer older than the ledger's data is no drift:
    /// the ledger would keep its own), field by field.
    package static func between(_ ledger: Ledger, and snapshot: AppStoreSnapshot) -> [Drift] {
        var after = ledger
        after.apply(snapshot)
        var drift: [Drift] = []
        for (key, new) in after.transactions.sorted(by: { $0.key < $1.key }) where ledger.transactions[key] != new {
            let info = new.info
            guard let old = ledger.transactions[key] else {
                drift.append(
                    Drift(
                        kind: .missingTransaction, originalTransactionId: info.originalTransactionId, transactionId: info.transactionId,
                        field: nil, ledger: nil, appStore: info.productId))
                continue
            }
            for (field, mine, theirs) in Self.fields(old.info, info) where mine != theirs {
                let kind: Kind = field == "revocationDate" && mine == nil ? .revoked : .staleTransaction
                drift.append(
                    Drift(
                        kind: kind, originalTransactionId: info.originalTransactionId, transactionId: info.transactionId,
                        field: field, ledger: mine, appStore: theirs))
            }
        }
        for (key, new) in after.subscriptions.sorted(by: { $0.key < $1.key }) where ledger.subscriptions[key] != new {
            let old = ledger.subscriptions[key]
            if old?.status != new.status {
                drift.append(
                    Drift(
                        kind: .staleStatus, originalTransactionId: key.id, transactionId: nil, field: "status",
                        ledger: old?.status.map { String($0.rawValue) }, appStore: new.status.map { String($0.rawValue) }))
            }
            guard let renewal = new.renewalInfo else { continue }
            guard let mine = old?.renewalInfo else {
                drift.append(
                    Drift(
                        kind: .missingRenewalInfo, originalTransactionId: key.id, transactionId: nil, field: nil, ledger: nil,
                        appStore: renewal.autoRenewProductId))
                continue
            }
            for (field, before, now) in Self.fields(mine, renewal) where before != now {
                drift.append(
                    Drift(kind: .staleRenewalInfo, originalTransactionId: key.id, transactionId: nil, field: field, ledger: before, appStore: now))
            }
        }
        return drift
    }

    /// The fields of a transaction that decide entitlements and answers, side by side (signature dates left out).
    static func fields(_ a: TransactionInfo, _ b: TransactionInfo) -> [(String, String?, String?)] {
        func date(_ value: Date?) -> String? { value.map { String($0.epochMilliseconds) } }
        return [
            ("productId", a.productId, b.productId),
            ("expiresDate", date(a.expiresDate), date(b.expiresDate)),
            ("revocationDate", date(a.revocationDate), date(b.revocationDate)),
            ("revocationReason", a.revocationReason.map { String($0.rawValue) }, b.revocationReason.map { String($0.rawValue) }),
            ("isUpgraded", a.isUpgraded.map { String($0) }, b.isUpgraded.map { String($0) }),
            ("quantity", a.quantity.map { String($0) }, b.quantity.map { String($0) }),
            ("appAccountToken", a.appAccountToken?.description, b.appAccountToken?.description),
            ("inAppOwnershipType", a.inAppOwnershipType?.rawValue, b.inAppOwnershipType?.rawValue),
        ]
    }

    /// The fields of a renewal info that decide entitlements and answers, side by side.
    static func fields(_ a: RenewalInfo, _ b: RenewalInfo) -> [(String, String?, String?)] {
        func date(_ value: Date?) -> String? { value.map { String($0.epochMilliseconds) } }
        return [
            ("autoRenewStatus", a.autoRenewStatus.map { String($0.rawValue) }, b.autoRenewStatus.map { String($0.rawValue) }),
            ("autoRenewProductId", a.autoRenewProductId, b.autoRenewProductId),
            ("isInBillingRetryPeriod", a.isInBillingRetryPeriod.map { String($0) }, b.isInBillingRetryPeriod.map { String($0) }),
            ("gracePeriodExpiresDate", date(a.gracePeriodExpiresDate), date(b.gracePeriodExpiresDate)),
            ("expirationIntent", a.expirationIntent.map { String($0.rawValue) }, b.expirationIntent.map { String($0.rawValue) }),
            ("renewalDate", date(a.renewalDate), date(b.renewalDate)),
            ("priceIncreaseStatus", a.priceIncreaseStatus.map { String($0.rawValue) }, b.priceIncreaseStatus.map { String($0.rawValue) }),
        ]
    }
}
