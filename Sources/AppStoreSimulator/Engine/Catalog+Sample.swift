import AppStoreModels

extension Catalog {
    /// The catalog `storekeeper simulator init` writes: one app with products of all four types, three
    /// subscription groups (with and without Billing Grace Period, one family-shareable), and offers of every kind.
    package static let sample = Catalog(
        apps: [App(bundleId: "com.example.storekeeper", appAppleId: 6_450_000_001, name: "Storekeeper Example")],
        subscriptionGroups: [
            SubscriptionGroup(id: "21000001", bundleId: "com.example.storekeeper", name: "Pro", gracePeriodDays: 16),
            SubscriptionGroup(id: "21000002", bundleId: "com.example.storekeeper", name: "News", gracePeriodDays: 0),
            SubscriptionGroup(id: "21000003", bundleId: "com.example.storekeeper", name: "Family", gracePeriodDays: 3),
        ],
        products: [
            Product(
                productId: "premium.monthly", bundleId: "com.example.storekeeper", type: .autoRenewable,
                prices: ["USA": 19_990, "GBR": 17_990, "FRA": 19_990, "JPN": 3_000_000],
                subscriptionGroupId: "21000001", level: 1, period: .oneMonth
            ),
            Product(
                productId: "pro.monthly", bundleId: "com.example.storekeeper", type: .autoRenewable,
                prices: ["USA": 9_990, "GBR": 8_990, "FRA": 9_990, "JPN": 1_500_000],
                subscriptionGroupId: "21000001", level: 2, period: .oneMonth,
                offers: [
                    Offer(id: "intro.trial", type: .introductory, discountType: .freeTrial, period: .oneWeek),
                    Offer(
                        id: "promo.half", type: .promotional, discountType: .payAsYouGo, period: .oneMonth,
                        periodCount: 3, prices: ["USA": 4_990, "GBR": 4_490, "FRA": 4_990, "JPN": 750_000]
                    ),
                    Offer(
                        id: "code.free-month", type: .offerCode, discountType: .freeTrial, period: .oneMonth
                    ),
                    Offer(
                        id: "winback.month", type: .winBack, discountType: .payUpFront, period: .oneMonth,
                        prices: ["USA": 1_990, "GBR": 1_790, "FRA": 1_990, "JPN": 300_000]
                    ),
                ]
            ),
            Product(
                productId: "pro.yearly", bundleId: "com.example.storekeeper", type: .autoRenewable,
                prices: ["USA": 99_990, "GBR": 89_990, "FRA": 99_990, "JPN": 15_000_000],
                subscriptionGroupId: "21000001", level: 2, period: .oneYear
            ),
            Product(
                productId: "basic.monthly", bundleId: "com.example.storekeeper", type: .autoRenewable,
                prices: ["USA": 4_990, "GBR": 4_490, "FRA": 4_990, "JPN": 750_000],
                subscriptionGroupId: "21000001", level: 3, period: .oneMonth
            ),
            Product(
                productId: "news.weekly", bundleId: "com.example.storekeeper", type: .autoRenewable,
                prices: ["USA": 1_990, "GBR": 1_790, "FRA": 1_990, "JPN": 300_000],
                subscriptionGroupId: "21000002", level: 1, period: .oneWeek
            ),
            Product(
                productId: "family.monthly", bundleId: "com.example.storekeeper", type: .autoRenewable,
                prices: ["USA": 14_990, "GBR": 12_990, "FRA": 14_990, "JPN": 2_200_000],
                subscriptionGroupId: "21000003", level: 1, period: .oneMonth, familyShareable: true
            ),
            Product(
                productId: "unlock.lifetime", bundleId: "com.example.storekeeper", type: .nonConsumable,
                prices: ["USA": 29_990, "GBR": 26_990, "FRA": 29_990, "JPN": 4_500_000], familyShareable: true,
                offers: [Offer(id: "code.unlock-half", type: .offerCode, discountType: .oneTime, period: .oneMonth, prices: ["USA": 14_990])]
            ),
            Product(
                productId: "coins.100", bundleId: "com.example.storekeeper", type: .consumable,
                prices: ["USA": 990, "GBR": 890, "FRA": 990, "JPN": 150_000]
            ),
            Product(
                productId: "season.pass", bundleId: "com.example.storekeeper", type: .nonRenewing,
                prices: ["USA": 24_990, "GBR": 22_990, "FRA": 24_990, "JPN": 3_800_000], period: .threeMonths
            ),
        ]
    )
}
