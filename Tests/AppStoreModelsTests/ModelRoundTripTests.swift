import Foundation
import Testing

@testable import AppStoreModels

@Suite("Models: decode and re-encode")
struct ModelRoundTripTests {
    static func roundTrip<T: Codable>(_ type: T.Type, _ json: Data) throws -> (T, JSONValue, JSONValue) {
        let decoded = try AppStoreJSON.makeDecoder().decode(type, from: json)
        let encoded = try AppStoreJSON.makeEncoder().encode(decoded)
        let original = try JSONDecoder().decode(JSONValue.self, from: json)
        let again = try JSONDecoder().decode(JSONValue.self, from: encoded)
        return (decoded, original, again)
    }

    @Test("every corpus payload decodes and re-encodes to the same JSON values", arguments: CorpusPayloads.all)
    func corpus(payload: CorpusPayloads.Payload) throws {
        switch payload.kind {
        case "notification":
            let (decoded, original, again) = try Self.roundTrip(NotificationPayload.self, payload.json)
            #expect(original == again)
            #expect(decoded.notificationType.isKnown)
        case "transaction":
            let (decoded, original, again) = try Self.roundTrip(TransactionInfo.self, payload.json)
            #expect(original == again)
            #expect(decoded.type.isKnown)
        case "renewalinfo":
            let (_, original, again) = try Self.roundTrip(RenewalInfo.self, payload.json)
            #expect(original == again)
        default:
            Issue.record("unknown corpus kind \(payload.kind)")
        }
    }

    @Test("dates are epoch milliseconds, exactly, in both directions")
    func dates() throws {
        let json = Data(#"{"originalTransactionId":"1","signedDate":1759302518835,"renewalDate":1}"#.utf8)
        let renewal = try AppStoreJSON.makeDecoder().decode(RenewalInfo.self, from: json)
        #expect(renewal.signedDate?.epochMilliseconds == 1_759_302_518_835)
        #expect(renewal.renewalDate == Date(timeIntervalSince1970: 0.001))
        let text = String(decoding: try AppStoreJSON.makeEncoder().encode(renewal), as: UTF8.self)
        #expect(text.contains(#""signedDate":1759302518835"#))
        #expect(text.contains(#""renewalDate":1"#))
    }

    @Test("a transaction with every field, including values Apple has not invented yet, round-trips")
    func everyTransactionField() throws {
        let json = Data(
            #"""
            {"transactionId":"2","originalTransactionId":"1","webOrderLineItemId":"3","bundleId":"b","productId":"p",
             "subscriptionGroupIdentifier":"g","purchaseDate":1700000000000,"originalPurchaseDate":1690000000000,
             "expiresDate":1710000000000,"quantity":2,"type":"Future Product Type","appAccountToken":"7a0ac2a4-3d9b-4d3c-9e55-0f2a8f0d7c11",
             "inAppOwnershipType":"BORROWED","signedDate":1700000000123,"revocationReason":7,"revocationDate":1700000001000,
             "revocationType":"REFUND_PARTIAL_FUTURE","revocationPercentage":50000,"isUpgraded":true,"offerType":9,
             "offerIdentifier":"o","offerDiscountType":"NEW_DISCOUNT","offerPeriod":"P1M","environment":"Staging",
             "storefront":"USA","storefrontId":"143441","transactionReason":"GIFT","price":1990,"currency":"USD",
             "appTransactionId":"704","previousOriginalTransactionId":"0","advancedCommerceInfo":{"items":[{"sku":"x","price":1.5,"n":null}]},
             "billingPlanType":"QUARTERLY","commitmentInfo":{"billingPeriodNumber":1,"commitmentExpiresDate":1730000000000,"commitmentPrice":11880,"totalBillingPeriods":12},
             "deviceVerification":"AAAA","deviceVerificationNonce":"29beb115-5689-457e-82e6-5658775c15ec"}
            """#.utf8
        )
        let (decoded, original, again) = try Self.roundTrip(TransactionInfo.self, json)
        #expect(original == again)
        #expect(decoded.type.rawValue == "Future Product Type")
        #expect(!decoded.type.isKnown)
        #expect(decoded.inAppOwnershipType?.isKnown == false)
        #expect(decoded.revocationReason?.rawValue == 7)
        #expect(decoded.offerType == OfferType(rawValue: 9))
        #expect(decoded.environment?.rawValue == "Staging")
        #expect(decoded.transactionReason?.description == "GIFT")
        #expect(decoded.price == 1990)
        #expect(decoded.appAccountToken?.description == "7a0ac2a4-3d9b-4d3c-9e55-0f2a8f0d7c11")
        #expect(decoded.commitmentInfo?.totalBillingPeriods == 12)
        #expect(decoded.isUpgraded == true)
    }

    @Test("a renewal info with every field round-trips")
    func everyRenewalField() throws {
        let json = Data(
            #"""
            {"originalTransactionId":"1","productId":"p","autoRenewProductId":"q","autoRenewStatus":2,"expirationIntent":6,
             "isInBillingRetryPeriod":true,"priceIncreaseStatus":1,"gracePeriodExpiresDate":1700000000000,"offerType":4,
             "offerIdentifier":"wb","offerDiscountType":"FREE_TRIAL","offerPeriod":"P1W","signedDate":1700000000001,
             "environment":"Sandbox","recentSubscriptionStartDate":1600000000000,"renewalDate":1700000000000,"currency":"EUR",
             "renewalPrice":4990,"eligibleWinBackOfferIds":["a","b"],"appAccountToken":"00000000-0000-0000-0000-000000000051",
             "appTransactionId":"704","advancedCommerceInfo":{"k":[true,false]},"renewalBillingPlanType":"MONTHLY",
             "commitmentInfo":{"commitmentAutoRenewProductId":"p","commitmentAutoRenewStatus":1,"commitmentRenewalBillingPlanType":"MONTHLY","commitmentRenewalDate":1710000000000,"commitmentRenewalPrice":990}}
            """#.utf8
        )
        let (decoded, original, again) = try Self.roundTrip(RenewalInfo.self, json)
        #expect(original == again)
        #expect(decoded.autoRenewStatus?.isKnown == false)
        #expect(decoded.expirationIntent?.rawValue == 6)
        #expect(decoded.offerType == .winBack)
        #expect(decoded.eligibleWinBackOfferIds == ["a", "b"])
    }

    @Test("an app transaction with every field round-trips")
    func everyAppTransactionField() throws {
        let json = Data(
            #"""
            {"receiptType":"Production","appAppleId":123,"bundleId":"b","applicationVersion":"2","versionExternalIdentifier":99,
             "receiptCreationDate":1700000000000,"originalPurchaseDate":1600000000000,"originalApplicationVersion":"1",
             "deviceVerification":"AAAA","deviceVerificationNonce":"29beb115-5689-457e-82e6-5658775c15ec",
             "preorderDate":1500000000000,"appTransactionId":"704","originalPlatform":"watchOS"}
            """#.utf8
        )
        let (decoded, original, again) = try Self.roundTrip(AppTransaction.self, json)
        #expect(original == again)
        #expect(decoded.originalPlatform?.isKnown == false)
        #expect(decoded.receiptType == .production)
    }

    @Test(
        "notifications with summary, externalPurchaseToken and appData round-trip",
        arguments: [
            #"{"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","notificationUUID":"u","version":"2.0","signedDate":1,"summary":{"environment":"Production","appAppleId":1,"bundleId":"b","productId":"p","requestIdentifier":"r","storefrontCountryCodes":["USA","FRA"],"succeededCount":5,"failedCount":2}}"#,
            #"{"notificationType":"EXTERNAL_PURCHASE_TOKEN","subtype":"ACTIVE_TOKEN_REMINDER","notificationUUID":"u","version":"2.0","signedDate":1,"externalPurchaseToken":{"externalPurchaseId":"SANDBOX_1","tokenCreationDate":1,"appAppleId":1,"bundleId":"b","tokenExpirationDate":2,"tokenType":"SERVICES"}}"#,
            #"{"notificationType":"RESCIND_CONSENT","notificationUUID":"u","version":"2.0","signedDate":1,"appData":{"appAppleId":1,"bundleId":"b","environment":"Sandbox","signedAppTransactionInfo":"x.y.z"}}"#,
            #"{"notificationType":"CONSUMPTION_REQUEST","notificationUUID":"u","version":"2.0","signedDate":1,"data":{"appAppleId":1,"bundleId":"b","bundleVersion":"7","environment":"Production","signedTransactionInfo":"a.b.c","consumptionRequestReason":"LEGAL","status":1}}"#,
            #"{"notificationType":"BRAND_NEW_TYPE","subtype":"BRAND_NEW_SUBTYPE","notificationUUID":"u","version":"3.0","signedDate":1,"data":{"bundleId":"b","environment":"Sandbox","status":9,"consumptionRequestReason":"NEW_REASON"}}"#,
        ])
    func otherNotifications(json: String) throws {
        let (decoded, original, again) = try Self.roundTrip(NotificationPayload.self, Data(json.utf8))
        #expect(original == again)
        if decoded.notificationType.rawValue == "BRAND_NEW_TYPE" {
            #expect(!decoded.notificationType.isKnown)
            #expect(decoded.subtype?.isKnown == false)
            #expect(decoded.data?.status?.rawValue == 9)
        }
        if let token = decoded.externalPurchaseToken {
            #expect(token.impliedEnvironment == .sandbox)
        }
    }

    @Test("a malformed UUID is a decoding error, not a silent nil")
    func badUUID() {
        let json = Data(#"{"originalTransactionId":"1","appAccountToken":"not-a-uuid"}"#.utf8)
        #expect(throws: DecodingError.self) { try AppStoreJSON.makeDecoder().decode(RenewalInfo.self, from: json) }
    }

    @Test("UUIDs parse in either case and print in lower case, as Foundation's do; anything else is refused")
    func uuidText() {
        for _ in 0..<2_000 {
            let uuid = UUID()
            let upper = uuid.uuidString
            #expect(LowercaseUUID(uuidString: upper)?.uuid == uuid)
            #expect(LowercaseUUID(uuidString: upper.lowercased())?.uuid == uuid)
            #expect(LowercaseUUID(uuid).description == upper.lowercased())
        }
        #expect(
            LowercaseUUID(UUID(uuid: (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 255))).description == "00010203-0405-0607-0809-0a0b0c0d0eff")
        #expect(LowercaseUUID(uuidString: "aBcDeF01-2345-6789-AbCd-Ef0123456789")?.description == "abcdef01-2345-6789-abcd-ef0123456789")
        for text in [
            "", "not-a-uuid", "abcdef01-2345-6789-abcd-ef012345678", "abcdef01-2345-6789-abcd-ef01234567890",
            "abcdef0123456789abcdef0123456789", "abcdef01-2345-6789-abcd_ef0123456789", "abcdef012-345-6789-abcd-ef0123456789",
            "gbcdef01-2345-6789-abcd-ef0123456789", "{bcdef01-2345-6789-abcd-ef0123456789", " bcdef01-2345-6789-abcd-ef0123456789",
            "+bcdef01-2345-6789-abcd-ef0123456789", "abcdef01-2345-6789-abcd-ef012345678é", "abcdef01-2345-6789-abcd-ef01234567\u{0}",
        ] {
            #expect(LowercaseUUID(uuidString: text) == nil, "\(text)")
        }
    }
}

@Suite("Models: open wire values")
struct OpenWireValueTests {
    static func check<T: OpenWireValue>(_ type: T.Type, unknown: T.RawValue) throws {
        #expect(!T.knownValues.isEmpty)
        #expect(Set(T.knownValues).count == T.knownValues.count, "duplicate known values in \(T.self)")
        for value in T.knownValues {
            #expect(value.isKnown)
            let data = try JSONEncoder().encode([value])
            #expect(try JSONDecoder().decode([T].self, from: data) == [value])
        }
        let data = try JSONEncoder().encode([unknown])
        let decoded = try JSONDecoder().decode([T].self, from: data)
        #expect(decoded.first?.rawValue == unknown)
        #expect(decoded.first?.isKnown == false)
        #expect(try JSONEncoder().encode(decoded) == data)
    }

    @Test("every wire enum decodes unknown values, keeps the raw value and re-encodes it unchanged")
    func all() throws {
        try Self.check(NotificationType.self, unknown: "SOMETHING_NEW")
        try Self.check(NotificationSubtype.self, unknown: "SOMETHING_NEW")
        try Self.check(SubscriptionStatus.self, unknown: 42)
        try Self.check(OfferType.self, unknown: 42)
        try Self.check(OfferDiscountType.self, unknown: "SOMETHING_NEW")
        try Self.check(AppStoreEnvironment.self, unknown: "Staging")
        try Self.check(InAppOwnershipType.self, unknown: "SOMETHING_NEW")
        try Self.check(RevocationReason.self, unknown: 42)
        try Self.check(RevocationType.self, unknown: "SOMETHING_NEW")
        try Self.check(TransactionReason.self, unknown: "SOMETHING_NEW")
        try Self.check(ProductType.self, unknown: "Something New")
        try Self.check(ExpirationIntent.self, unknown: 42)
        try Self.check(AutoRenewStatus.self, unknown: 42)
        try Self.check(PriceIncreaseStatus.self, unknown: 42)
        try Self.check(ConsumptionRequestReason.self, unknown: "SOMETHING_NEW")
        try Self.check(ExternalPurchaseTokenType.self, unknown: "SOMETHING_NEW")
        try Self.check(PurchasePlatform.self, unknown: "carOS")
        try Self.check(BillingPlanType.self, unknown: "SOMETHING_NEW")
    }

    @Test("the spec's notification types and subtypes are all known")
    func specValues() {
        for name in [
            "SUBSCRIBED", "DID_RENEW", "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED", "EXPIRED", "REFUND", "REVOKE",
            "REFUND_REVERSED", "CONSUMPTION_REQUEST", "ONE_TIME_CHARGE", "RESCIND_CONSENT", "MIGRATION",
        ] {
            #expect(NotificationType(rawValue: name).isKnown, "\(name)")
        }
        #expect(NotificationSubtype(rawValue: "ACTIVE_TOKEN_REMINDER").isKnown)
        #expect(NotificationSubtype.knownValues.count == 19)
        #expect(NotificationType.knownValues.count == 23)
    }
}
