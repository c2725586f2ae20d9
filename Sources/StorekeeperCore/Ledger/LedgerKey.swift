package import AppStoreModels
import Foundation

/// Identifies a record within one environment: sandbox and production never mix (DESIGN rule 4).
package struct LedgerKey: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    package var environment: AppStoreEnvironment
    package var id: String

    package init(_ environment: AppStoreEnvironment, _ id: String) {
        self.environment = environment
        self.id = id
    }

    package var description: String { "\(environment.rawValue)/\(id)" }

    package static func < (lhs: LedgerKey, rhs: LedgerKey) -> Bool {
        (lhs.environment.rawValue, lhs.id) < (rhs.environment.rawValue, rhs.id)
    }
}
