import AppStoreModels
import Foundation

/// A backend a ledger can be copied into.
package protocol LedgerImporting: LedgerStore {
    /// Whether the ledger holds nothing (a copy goes into an empty ledger only).
    func isEmpty() async throws(StorageError) -> Bool
    /// Writes a page's records as they are, in one transaction.
    func importPage(_ page: LedgerPage) async throws(StorageError)
}
