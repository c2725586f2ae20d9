package import AppStoreModels
package import Foundation

/// The app account token the server last issued to a customer of an app and environment
/// (`LedgerStore.appAccountToken(for:bundleId:environment:renew:)`).
package struct IssuedToken: Sendable, Hashable {
    package var bundleId: String
    package var environment: AppStoreEnvironment
    package var customerId: String
    package var token: LowercaseUUID
    package var issuedAt: Date

    package init(bundleId: String, environment: AppStoreEnvironment, customerId: String, token: LowercaseUUID, issuedAt: Date) {
        self.bundleId = bundleId
        self.environment = environment
        self.customerId = customerId
        self.token = token
        self.issuedAt = issuedAt
    }
}
