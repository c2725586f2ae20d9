public import AppStoreModels
public import Foundation

/// A customer of one app in one environment, as a read names them.
public struct CustomerScope: Sendable, Hashable, Comparable {
    public var customerId: String
    public var bundleId: String
    public var environment: AppStoreEnvironment

    public init(customerId: String, bundleId: String, environment: AppStoreEnvironment) {
        self.customerId = customerId
        self.bundleId = bundleId
        self.environment = environment
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.customerId, lhs.bundleId, lhs.environment.rawValue) < (rhs.customerId, rhs.bundleId, rhs.environment.rawValue)
    }
}
