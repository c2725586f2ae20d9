import AppStoreModels
import Foundation

/// Copies one ledger into another, empty one, and then checks that every customer's ledger reads the same from both.
package enum LedgerCopy {
    package struct Report: Codable, Sendable {
        package var records = 0
        package var pages = 0
        package var customersCompared = 0
        /// Customers whose ledger reads differently from the two (none after a good copy).
        package var customersDiffering: [String] = []
    }

    package static func copy(
        from source: some LedgerExporting, to target: some LedgerImporting, pageSize: Int = 500,
        progress: (@Sendable (Int) -> Void)? = nil
    ) async throws -> Report {
        guard try await target.isEmpty() else {
            throw StorageError(
                "the target ledger is not empty (a server has run on it, or a copy went into it): a copy goes into a new, empty database, "
                    + "before any server starts on it")
        }
        // The ledger's secrets first (the polling cursors consumers hold stay valid on the copy). A server that started
        // on the target since it was found empty made its own: refused before anything else is copied.
        for (name, value) in try await source.ledgerSecrets().sorted(by: { $0.key < $1.key }) {
            guard try await target.ledgerSecret(name, orNew: value) == value else {
                throw StorageError(
                    "the target ledger has its own secret '\(name)' (a server has used it): a copy goes into a new, empty database")
            }
        }
        var report = Report()
        try await source.exportPages(pageSize: pageSize) { page in
            try await target.importPage(page)
            report.records += page.count
            report.pages += 1
            progress?(report.records)
        }
        for customer in try await source.customers() {
            let before = try await source.ledger(for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
            let after = try await target.ledger(for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
            report.customersCompared += 1
            if before != after { report.customersDiffering.append("\(customer.customerId) (\(customer.bundleId) \(customer.environment.rawValue))") }
        }
        return report
    }
}
