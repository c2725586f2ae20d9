import AppStoreModels
import Foundation

/// A backend whose whole ledger can be read out in pages.
package protocol LedgerExporting: LedgerStore {
    /// Calls `body` with each page of at most about `pageSize` records, every record once.
    func exportPages(pageSize: Int, _ body: (LedgerPage) async throws -> Void) async throws
    /// Every customer known to some app in some environment (through a link or a token).
    func customers() async throws(StorageError) -> [CustomerScope]
    /// The secrets the ledger has made for itself, by name (read only: none is made).
    func ledgerSecrets() async throws(StorageError) -> [String: [UInt8]]
}
