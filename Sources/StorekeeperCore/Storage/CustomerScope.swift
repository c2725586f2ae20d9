package import AppStoreModels
import Foundation

/// A customer of one app in one environment, as a read names them.
package struct CustomerScope: Sendable, Hashable, Comparable {
    package var customerId: String
    package var bundleId: String
    package var environment: AppStoreEnvironment

    package init(customerId: String, bundleId: String, environment: AppStoreEnvironment) {
        self.customerId = customerId
        self.bundleId = bundleId
        self.environment = environment
    }

    package static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.customerId, lhs.bundleId, lhs.environment.rawValue) < (rhs.customerId, rhs.bundleId, rhs.environment.rawValue)
    }
}
