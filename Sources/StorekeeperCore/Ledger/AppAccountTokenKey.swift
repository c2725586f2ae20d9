package import AppStoreModels
import Foundation

/// An app account token within one app and environment. A token belongs to at most one customer there; the same
/// UUID in another app, or in the other environment, is another token with its own owner.
package struct AppAccountTokenKey: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    package var bundleId: String
    package var environment: AppStoreEnvironment
    package var token: LowercaseUUID

    package init(bundleId: String, environment: AppStoreEnvironment, token: LowercaseUUID) {
        self.bundleId = bundleId
        self.environment = environment
        self.token = token
    }

    package var description: String { "\(bundleId)/\(environment.rawValue)/\(token)" }

    package static func < (lhs: AppAccountTokenKey, rhs: AppAccountTokenKey) -> Bool {
        (lhs.bundleId, lhs.environment.rawValue, lhs.token.description) < (rhs.bundleId, rhs.environment.rawValue, rhs.token.description)
    }
}
