public import Foundation

// The payloads a ledger reads back on every uncached customer read, decoded by hand: Foundation's `JSONDecoder`
// looks up each of a payload's ~35 keys through a keyed container and each wire value through a single-value one,
// which made decoding the largest single cost of a read on both backends (Benchmarks/History.md, seventh round).
// The hand-written path reads the members in one pass and gives up on anything outside the plain shape (see
// `FlatJSONScanner`), and then `JSONDecoder` decodes the same bytes: the result, or the error, is always its.

/// A payload with a hand-written decoder for its plain shape (``TransactionInfo``, ``RenewalInfo``); whoever decodes
/// payloads of any type asks for this one first (as `SignedDataVerifier` does).
public protocol FastDecodablePayload: Decodable {
    /// Decodes payload JSON as `fallback` would; faster when `fallback` reads dates as epoch milliseconds and keys
    /// unchanged (``AppStoreJSON/makeDecoder()``), the App Store's format.
    init(json: Data, fallback: JSONDecoder) throws
}

extension TransactionInfo: FastDecodablePayload {
    public init(json: Data, fallback: JSONDecoder) throws {
        self = try FlatJSONScanner.decode(json, fallback: fallback, flat: Self.decodeFlat)
    }

    /// The members in the order `decodeFlat` numbers them; the first six are required.
    static let flatKeys = FlatJSONKeys([
        "transactionId", "originalTransactionId", "bundleId", "productId", "purchaseDate", "type",
        "webOrderLineItemId", "subscriptionGroupIdentifier", "originalPurchaseDate", "expiresDate", "quantity",
        "appAccountToken", "inAppOwnershipType", "signedDate", "revocationReason", "revocationDate", "revocationType",
        "revocationPercentage", "isUpgraded", "offerType", "offerIdentifier", "offerDiscountType", "offerPeriod",
        "environment", "storefront", "storefrontId", "transactionReason", "price", "currency", "appTransactionId",
        "previousOriginalTransactionId", "advancedCommerceInfo", "billingPlanType", "commitmentInfo",
        "deviceVerification", "deviceVerificationNonce",
    ])

    static func decodeFlat(_ bytes: UnsafeRawBufferPointer) throws -> TransactionInfo {
        var info = TransactionInfo(
            transactionId: "", originalTransactionId: "", bundleId: "", productId: "", purchaseDate: .distantPast, type: .consumable)
        try FlatJSONScanner.readMembers(of: bytes, flatKeys, required: 6) { position, value in
            switch position {
            case 0: info.transactionId = try value.string()
            case 1: info.originalTransactionId = try value.string()
            case 2: info.bundleId = try value.string()
            case 3: info.productId = try value.string()
            case 4: info.purchaseDate = try value.date()
            case 5: info.type = try value.wire()
            case 6: info.webOrderLineItemId = try value.string()
            case 7: info.subscriptionGroupIdentifier = try value.string()
            case 8: info.originalPurchaseDate = try value.date()
            case 9: info.expiresDate = try value.date()
            case 10: info.quantity = try value.int()
            case 11: info.appAccountToken = try value.uuid()
            case 12: info.inAppOwnershipType = try value.wire()
            case 13: info.signedDate = try value.date()
            case 14: info.revocationReason = try value.wire()
            case 15: info.revocationDate = try value.date()
            case 16: info.revocationType = try value.wire()
            case 17: info.revocationPercentage = try value.int()
            case 18: info.isUpgraded = try value.bool()
            case 19: info.offerType = try value.wire()
            case 20: info.offerIdentifier = try value.string()
            case 21: info.offerDiscountType = try value.wire()
            case 22: info.offerPeriod = try value.string()
            case 23: info.environment = try value.wire()
            case 24: info.storefront = try value.string()
            case 25: info.storefrontId = try value.string()
            case 26: info.transactionReason = try value.wire()
            case 27: info.price = try value.int64()
            case 28: info.currency = try value.string()
            case 29: info.appTransactionId = try value.string()
            case 30: info.previousOriginalTransactionId = try value.string()
            case 32: info.billingPlanType = try value.wire()
            case 34: info.deviceVerification = try value.string()
            case 35: info.deviceVerificationNonce = try value.uuid()
            default: throw FlatJSONScanner.Unsupported()  // advancedCommerceInfo, commitmentInfo: nested
            }
        }
        return info
    }
}

extension RenewalInfo: FastDecodablePayload {
    public init(json: Data, fallback: JSONDecoder) throws {
        self = try FlatJSONScanner.decode(json, fallback: fallback, flat: Self.decodeFlat)
    }

    /// The members in the order `decodeFlat` numbers them; the first is required.
    static let flatKeys = FlatJSONKeys([
        "originalTransactionId", "productId", "autoRenewProductId", "autoRenewStatus", "expirationIntent",
        "isInBillingRetryPeriod", "priceIncreaseStatus", "gracePeriodExpiresDate", "offerType", "offerIdentifier",
        "offerDiscountType", "offerPeriod", "signedDate", "environment", "recentSubscriptionStartDate", "renewalDate",
        "currency", "renewalPrice", "eligibleWinBackOfferIds", "appAccountToken", "appTransactionId",
        "advancedCommerceInfo", "commitmentInfo", "renewalBillingPlanType",
    ])

    static func decodeFlat(_ bytes: UnsafeRawBufferPointer) throws -> RenewalInfo {
        var info = RenewalInfo(originalTransactionId: "")
        try FlatJSONScanner.readMembers(of: bytes, flatKeys, required: 1) { position, value in
            switch position {
            case 0: info.originalTransactionId = try value.string()
            case 1: info.productId = try value.string()
            case 2: info.autoRenewProductId = try value.string()
            case 3: info.autoRenewStatus = try value.wire()
            case 4: info.expirationIntent = try value.wire()
            case 5: info.isInBillingRetryPeriod = try value.bool()
            case 6: info.priceIncreaseStatus = try value.wire()
            case 7: info.gracePeriodExpiresDate = try value.date()
            case 8: info.offerType = try value.wire()
            case 9: info.offerIdentifier = try value.string()
            case 10: info.offerDiscountType = try value.wire()
            case 11: info.offerPeriod = try value.string()
            case 12: info.signedDate = try value.date()
            case 13: info.environment = try value.wire()
            case 14: info.recentSubscriptionStartDate = try value.date()
            case 15: info.renewalDate = try value.date()
            case 16: info.currency = try value.string()
            case 17: info.renewalPrice = try value.int64()
            case 19: info.appAccountToken = try value.uuid()
            case 20: info.appTransactionId = try value.string()
            case 23: info.renewalBillingPlanType = try value.wire()
            default: throw FlatJSONScanner.Unsupported()  // eligibleWinBackOfferIds, advancedCommerceInfo, commitmentInfo
            }
        }
        return info
    }
}
