/// An App Store storefront: its country code, Apple's storefront ID and currency.
package struct Storefront: Hashable, Sendable {
    /// ISO 3166-1 alpha-3, e.g. `USA`.
    package var countryCode: String
    /// Apple's storefront ID, e.g. `143441`.
    package var id: String
    /// ISO 4217 currency.
    package var currency: String

    /// The storefronts the simulator knows.
    package static let all: [Storefront] = [
        Storefront(countryCode: "USA", id: "143441", currency: "USD"),
        Storefront(countryCode: "FRA", id: "143442", currency: "EUR"),
        Storefront(countryCode: "DEU", id: "143443", currency: "EUR"),
        Storefront(countryCode: "GBR", id: "143444", currency: "GBP"),
        Storefront(countryCode: "CAN", id: "143455", currency: "CAD"),
        Storefront(countryCode: "AUS", id: "143460", currency: "AUD"),
        Storefront(countryCode: "JPN", id: "143462", currency: "JPY"),
        Storefront(countryCode: "CHN", id: "143465", currency: "CNY"),
        Storefront(countryCode: "KOR", id: "143466", currency: "KRW"),
        Storefront(countryCode: "BRA", id: "143503", currency: "BRL"),
        Storefront(countryCode: "IND", id: "143467", currency: "INR"),
    ]

    package static func find(_ countryCode: String) -> Storefront? {
        all.first { $0.countryCode == countryCode }
    }
}
