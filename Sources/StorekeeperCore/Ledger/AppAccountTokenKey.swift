public import AppStoreModels
public import Foundation

/// An app account token within one app and environment. A token belongs to at most one customer there; the same
/// UUID in another app, or in the other environment, is another token with its own owner.
public struct AppAccountTokenKey: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public var bundleId: String
    public var environment: AppStoreEnvironment
    public var token: LowercaseUUID

    public init(bundleId: String, environment: AppStoreEnvironment, token: LowercaseUUID) {
        self.bundleId = bundleId
        self.environment = environment
        self.token = token
    }

    public var description: String { "\(bundleId)/\(environment.rawValue)/\(token)" }

    public static func < (lhs: AppAccountTokenKey, rhs: AppAccountTokenKey) -> Bool {
        (lhs.bundleId, lhs.environment.rawValue, lhs.token.description) < (rhs.bundleId, rhs.environment.rawValue, rhs.token.description)
    }
}
