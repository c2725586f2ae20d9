package import AppStoreModels
package import Foundation

/// A transaction as the ledger keeps it: the newest signed version seen, and where it came from.
package struct LedgerTransaction: Codable, Hashable, Sendable {
    package var info: TransactionInfo
    /// The `signedDate` of the version kept; an older version never replaces it (DESIGN rule 3).
    package var signedDate: Date
    /// What delivered this version: a notification UUID, `app` for a submission from the app, or
    /// ``Ledger/apiSource`` for the App Store Server API (reconciliation).
    package var source: String
    /// The raw JWS of the version kept.
    package var jws: String

    /// Whether this transaction comes after `other` in its subscription (by purchase date, then ID): the latest one
    /// decides the subscription's state.
    func isLater(than other: LedgerTransaction) -> Bool {
        (info.purchaseDate, info.transactionId) > (other.info.purchaseDate, other.info.transactionId)
    }

    package init(info: TransactionInfo, signedDate: Date, source: String, jws: String) {
        self.info = info
        self.signedDate = signedDate
        self.source = source
        self.jws = jws
    }
}
