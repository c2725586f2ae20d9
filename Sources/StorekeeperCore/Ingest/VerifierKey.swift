package import AppStoreModels

/// Which verifier: an app in an environment. Signed data picks its verifier by the claims it makes about itself
/// (`AppClaims`); the verifier then checks them.
package struct VerifierKey: Hashable, Sendable, CustomStringConvertible {
    package var bundleId: String
    package var environment: AppStoreEnvironment

    package init(bundleId: String, environment: AppStoreEnvironment) {
        self.bundleId = bundleId
        self.environment = environment
    }

    package var description: String { "\(bundleId) (\(environment.rawValue))" }
}
