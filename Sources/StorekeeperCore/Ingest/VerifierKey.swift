public import AppStoreModels

/// Which verifier: an app in an environment. Signed data picks its verifier by the claims it makes about itself
/// (``AppClaims``); the verifier then checks them.
public struct VerifierKey: Hashable, Sendable, CustomStringConvertible {
    public var bundleId: String
    public var environment: AppStoreEnvironment

    public init(bundleId: String, environment: AppStoreEnvironment) {
        self.bundleId = bundleId
        self.environment = environment
    }

    public var description: String { "\(bundleId) (\(environment.rawValue))" }
}
