import AppStoreModels
package import Foundation

/// Which entitlements products grant, and the rules that decide access (DESIGN rule 6).
package struct EntitlementConfiguration: Codable, Hashable, Sendable {
    /// Entitlement names each product grants, e.g. `pro.monthly` → `["pro"]`.
    package var productEntitlements: [String: [String]]
    /// Service level per auto-renewable product within its group (1 is the highest).
    package var subscriptionLevels: [String: Int]
    /// How long a non-renewing subscription lasts, in seconds.
    package var nonRenewingDurations: [String: TimeInterval]
    /// Whether billing retry (after any grace period) still grants access. StoreKit 2 says no by default.
    package var billingRetryGrantsAccess: Bool

    package init(
        productEntitlements: [String: [String]] = [:], subscriptionLevels: [String: Int] = [:],
        nonRenewingDurations: [String: TimeInterval] = [:], billingRetryGrantsAccess: Bool = false
    ) {
        self.productEntitlements = productEntitlements
        self.subscriptionLevels = subscriptionLevels
        self.nonRenewingDurations = nonRenewingDurations
        self.billingRetryGrantsAccess = billingRetryGrantsAccess
    }

    private enum CodingKeys: String, CodingKey {
        case productEntitlements, subscriptionLevels, nonRenewingDurations, billingRetryGrantsAccess
    }

    /// Every field may be left out of a configuration file; it then takes the default above.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            productEntitlements: try container.decodeIfPresent([String: [String]].self, forKey: .productEntitlements) ?? [:],
            subscriptionLevels: try container.decodeIfPresent([String: Int].self, forKey: .subscriptionLevels) ?? [:],
            nonRenewingDurations: try container.decodeIfPresent([String: TimeInterval].self, forKey: .nonRenewingDurations) ?? [:],
            billingRetryGrantsAccess: try container.decodeIfPresent(Bool.self, forKey: .billingRetryGrantsAccess) ?? false
        )
    }
}
