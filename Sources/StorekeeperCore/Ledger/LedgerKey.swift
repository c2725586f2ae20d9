public import AppStoreModels
public import Foundation

/// Identifies a record within one environment: sandbox and production never mix (DESIGN rule 4).
public struct LedgerKey: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public var environment: AppStoreEnvironment
    public var id: String

    public init(_ environment: AppStoreEnvironment, _ id: String) {
        self.environment = environment
        self.id = id
    }

    public var description: String { "\(environment.rawValue)/\(id)" }

    public static func < (lhs: LedgerKey, rhs: LedgerKey) -> Bool {
        (lhs.environment.rawValue, lhs.id) < (rhs.environment.rawValue, rhs.id)
    }
}
