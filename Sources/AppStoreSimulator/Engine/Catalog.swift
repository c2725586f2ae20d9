package import AppStoreModels
import Foundation

/// What the simulated App Store sells: apps, products, subscription groups, prices and offers.
///
/// Loaded from `catalog.json` in the simulator's directory; ``validate()`` refuses an inconsistent catalog with a
/// message that names the faulty entry.
package struct Catalog: Codable, Hashable, Sendable {
    /// An app in App Store Connect.
    package struct App: Codable, Hashable, Sendable {
        package var bundleId: String
        package var appAppleId: Int64
        package var name: String?

        package init(bundleId: String, appAppleId: Int64, name: String? = nil) {
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.name = name
        }
    }

    /// A subscription group: products that replace each other, ranked by level (1 is the highest service).
    package struct SubscriptionGroup: Codable, Hashable, Sendable {
        /// `subscriptionGroupIdentifier`, digits like Apple's.
        package var id: String
        package var bundleId: String
        package var name: String?
        /// Billing Grace Period in days: 0 (off), 3, 16 or 28.
        package var gracePeriodDays: Int

        package init(id: String, bundleId: String, name: String? = nil, gracePeriodDays: Int = 0) {
            self.id = id
            self.bundleId = bundleId
            self.name = name
            self.gracePeriodDays = gracePeriodDays
        }
    }

    /// A subscription offer or a one-time-product offer code.
    package struct Offer: Codable, Hashable, Sendable {
        /// `offerIdentifier`; unused for introductory offers, which Apple reports without one.
        package var id: String
        package var type: OfferType
        package var discountType: OfferDiscountType
        /// The length of one offer period, e.g. `P1W` for a one-week free trial.
        package var period: SubscriptionPeriod
        /// How many periods the offer lasts (pay-as-you-go), 1 otherwise.
        package var periodCount: Int
        /// Price per storefront (alpha-3) in milliunits for one offer period; absent means free.
        package var prices: [String: Int64]

        package init(
            id: String, type: OfferType, discountType: OfferDiscountType, period: SubscriptionPeriod,
            periodCount: Int = 1, prices: [String: Int64] = [:]
        ) {
            self.id = id
            self.type = type
            self.discountType = discountType
            self.period = period
            self.periodCount = periodCount
            self.prices = prices
        }
    }

    /// A product of one of the four types.
    package struct Product: Codable, Hashable, Sendable {
        package var productId: String
        package var bundleId: String
        package var type: ProductType
        /// Price per storefront (ISO 3166-1 alpha-3, e.g. `USA`) in milliunits of that storefront's currency.
        package var prices: [String: Int64]
        /// Auto-renewable subscriptions: the group and the level in it (1 = highest).
        package var subscriptionGroupId: String?
        package var level: Int?
        /// Auto-renewable: the billing period. Non-renewing: how long access lasts.
        package var period: SubscriptionPeriod?
        package var familyShareable: Bool
        package var offers: [Offer]

        package init(
            productId: String, bundleId: String, type: ProductType, prices: [String: Int64],
            subscriptionGroupId: String? = nil, level: Int? = nil, period: SubscriptionPeriod? = nil,
            familyShareable: Bool = false, offers: [Offer] = []
        ) {
            self.productId = productId
            self.bundleId = bundleId
            self.type = type
            self.prices = prices
            self.subscriptionGroupId = subscriptionGroupId
            self.level = level
            self.period = period
            self.familyShareable = familyShareable
            self.offers = offers
        }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            productId = try container.decode(String.self, forKey: .productId)
            bundleId = try container.decode(String.self, forKey: .bundleId)
            type = try container.decode(ProductType.self, forKey: .type)
            prices = try container.decode([String: Int64].self, forKey: .prices)
            subscriptionGroupId = try container.decodeIfPresent(String.self, forKey: .subscriptionGroupId)
            level = try container.decodeIfPresent(Int.self, forKey: .level)
            period = try container.decodeIfPresent(SubscriptionPeriod.self, forKey: .period)
            familyShareable = try container.decodeIfPresent(Bool.self, forKey: .familyShareable) ?? false
            offers = try container.decodeIfPresent([Offer].self, forKey: .offers) ?? []
        }
    }

    package var apps: [App]
    package var subscriptionGroups: [SubscriptionGroup]
    package var products: [Product]

    package init(apps: [App], subscriptionGroups: [SubscriptionGroup], products: [Product]) {
        self.apps = apps
        self.subscriptionGroups = subscriptionGroups
        self.products = products
    }

    package func app(_ bundleId: String) -> App? { apps.first { $0.bundleId == bundleId } }
    package func product(_ productId: String) -> Product? { products.first { $0.productId == productId } }
    package func group(_ id: String) -> SubscriptionGroup? { subscriptionGroups.first { $0.id == id } }

    /// Checks the catalog's consistency; the error names the first faulty entry.
    package func validate() throws(SimulatorError) {
        func fail(_ message: String) -> SimulatorError { SimulatorError(.invalidCatalog, message) }
        guard !apps.isEmpty else { throw fail("the catalog has no apps") }
        var seen = Set<String>()
        for app in apps {
            guard !app.bundleId.isEmpty, app.appAppleId > 0 else {
                throw fail("app '\(app.bundleId)' needs a bundleId and a positive appAppleId")
            }
            guard seen.insert(app.bundleId).inserted else { throw fail("app '\(app.bundleId)' is listed twice") }
        }
        for group in subscriptionGroups {
            guard app(group.bundleId) != nil else {
                throw fail("subscription group '\(group.id)' belongs to unknown app '\(group.bundleId)'")
            }
            guard [0, 3, 16, 28].contains(group.gracePeriodDays) else {
                throw fail("subscription group '\(group.id)': gracePeriodDays must be 0, 3, 16 or 28, not \(group.gracePeriodDays)")
            }
        }
        seen = []
        for product in products {
            let name = "product '\(product.productId)'"
            guard !product.productId.isEmpty else { throw fail("a product has an empty productId") }
            guard seen.insert(product.productId).inserted else { throw fail("\(name) is listed twice") }
            guard app(product.bundleId) != nil else { throw fail("\(name) belongs to unknown app '\(product.bundleId)'") }
            guard product.type.isKnown else { throw fail("\(name) has unknown type '\(product.type)'") }
            guard !product.prices.isEmpty else { throw fail("\(name) has no prices") }
            for (storefront, price) in product.prices {
                guard Storefront.find(storefront) != nil else { throw fail("\(name): unknown storefront '\(storefront)'") }
                guard price >= 0 else { throw fail("\(name): negative price in \(storefront)") }
            }
            switch product.type {
            case .autoRenewable:
                guard let groupId = product.subscriptionGroupId, let group = group(groupId),
                    group.bundleId == product.bundleId
                else { throw fail("\(name) needs a subscriptionGroupId of a group of the same app") }
                guard let level = product.level, level >= 1 else { throw fail("\(name) needs a level of 1 or more") }
                guard let period = product.period, SubscriptionPeriod.subscriptionPeriods.contains(period) else {
                    throw fail("\(name) needs a period of P1W, P1M, P2M, P3M, P6M or P1Y")
                }
            case .nonRenewing:
                guard product.period != nil else { throw fail("\(name) (non-renewing) needs a period: how long access lasts") }
                guard !product.familyShareable else { throw fail("\(name): only auto-renewables and non-consumables can be family-shared") }
            case .consumable:
                guard !product.familyShareable else { throw fail("\(name): only auto-renewables and non-consumables can be family-shared") }
            default:
                break
            }
            for offer in product.offers {
                guard offer.periodCount >= 1 else { throw fail("\(name): offer '\(offer.id)' needs periodCount ≥ 1") }
                if product.type != .autoRenewable {
                    guard offer.type == .offerCode, offer.discountType == .oneTime else {
                        throw fail("\(name): one-time products take only offer codes (type 3, ONE_TIME)")
                    }
                } else if offer.discountType == .oneTime {
                    throw fail("\(name): ONE_TIME offers are for one-time products")
                }
            }
        }
    }
}
