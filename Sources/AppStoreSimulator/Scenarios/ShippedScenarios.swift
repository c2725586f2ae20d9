/// The scenarios Storekeeper ships (`storekeeper simulator run NAME`), one per lifecycle of APPSTORE-SPEC §4, on
/// the sample catalog. Their text is in `Sources/AppStoreSimulator/Scenarios/`.
package enum ShippedScenarios {
    /// Name and text of each shipped scenario.
    package static let all: [(name: String, text: String)] = [
        ("subscriber-lifecycle", PackageResources.subscriber_lifecycle_scenario),
        ("billing-retry", PackageResources.billing_retry_scenario),
        ("grace-period-expiry", PackageResources.grace_period_expiry_scenario),
        ("plan-changes", PackageResources.plan_changes_scenario),
        ("offers", PackageResources.offers_scenario),
        ("price-increase", PackageResources.price_increase_scenario),
        ("refunds", PackageResources.refunds_scenario),
        ("family-sharing", PackageResources.family_sharing_scenario),
        ("extensions-and-removal", PackageResources.extensions_and_removal_scenario),
    ].map { ($0.0, String(decoding: $0.1, as: UTF8.self)) }

    /// A shipped scenario by name, parsed.
    package static func named(_ name: String) throws(SimulatorError) -> Scenario? {
        guard let entry = all.first(where: { $0.name == name }) else { return nil }
        return try Scenario(name: name, text: entry.text)
    }
}
