import AppStoreModels
import Foundation
import Testing

/// The App Store Server API's contract, written once for the client and the simulator.
@Suite("App Store Server API contract")
struct APIContractTests {
    @Test("error codes: unique, named, their status their first three digits, Apple's retryable ones retryable")
    func errorCodes() {
        #expect(Set(APIErrorCode.all.map(\.code)).count == APIErrorCode.all.count)
        #expect(Set(APIErrorCode.all.map(\.name)).count == APIErrorCode.all.count)
        for code in APIErrorCode.all {
            #expect([400, 403, 404, 429, 500].contains(code.httpStatus), "\(code)")
            #expect(code.name.hasSuffix("Error") && !code.message.isEmpty, "\(code)")
            #expect(APIErrorCode.named(code.code) == code)
        }
        #expect(APIErrorCode.all.filter(\.isRetryable).map(\.code).sorted() == [4_040_002, 4_040_004, 4_040_006, 4_290_000, 5_000_001])
        #expect(APIErrorCode.named(4_000_014)?.name == "InvalidPaginationTokenError")
    }

    @Test(
        "rate-limit families by path, with Apple's rates and sandbox at 10 %",
        arguments: [
            ("/inApps/v2/history/2000000000000001", APIRateLimitFamily.general, 50.0),
            ("/inApps/v1/subscriptions/2000000000000001", .general, 50),
            ("/inApps/v1/notifications/history", .general, 50),
            ("/inApps/v1/subscriptions/extend/2000000000000001", .extendAndToken, 20),
            ("/inApps/v1/transactions/2000000000000001/appAccountToken", .extendAndToken, 20),
            ("/inApps/v1/lookup/MTEST", .lookupAndRefunds, 10),
            ("/inApps/v2/refund/lookup/2000000000000001", .lookupAndRefunds, 10),
            ("/inApps/v1/subscriptions/extend/mass", .massAndTest, 1),
            ("/inApps/v1/notifications/test", .massAndTest, 1),
        ])
    func families(path: String, family: APIRateLimitFamily, rate: Double) {
        #expect(APIRateLimitFamily.of(path: path) == family)
        #expect(family.rate(sandbox: false) == rate && family.rate(sandbox: true) == rate / 10)
    }

    @Test("the endpoint table: each path fills its parameters and is matched back to its own endpoint, and no other")
    func endpoints() {
        #expect(AppStoreEndpoint.all.count == 18 && Set(AppStoreEndpoint.all).count == 18)
        for endpoint in AppStoreEndpoint.all {
            let parameters = endpoint.pattern.split(separator: "/").filter { $0.hasPrefix(":") }.indices.map { "2000000000000\($0)" }
            let path = endpoint.path(parameters)
            #expect(!path.contains(":"), "\(endpoint): \(path)")
            #expect(AppStoreEndpoint.matching(method: endpoint.method.rawValue, path: path) == endpoint, "\(path)")
            #expect(APIRateLimitFamily.of(path: path) == endpoint.family, "\(path)")
        }
        #expect(AppStoreEndpoint.getRenewalExtensionStatus.path("pro.monthly", "r1") == "/inApps/v1/subscriptions/extend/mass/pro.monthly/r1")
        #expect(AppStoreEndpoint.matching(method: "DELETE", path: "/inApps/v1/transactions/1") == nil)
        #expect(AppStoreEndpoint.matching(method: "GET", path: "/inApps/v1/transactions/") == nil)
    }

    @Test("request rules: transaction IDs, extensions, request identifiers, storefronts, notification history bodies")
    func rules() {
        #expect(
            APIRequestRules.isTransactionId("2000000000000001") && !APIRequestRules.isTransactionId("") && !APIRequestRules.isTransactionId("12a"))
        #expect(!APIRequestRules.isTransactionId(String(repeating: "1", count: 21)) && !APIRequestRules.isTransactionId("١٢٣"))
        #expect(
            APIRequestRules.isRequestIdentifier("x") && !APIRequestRules.isRequestIdentifier("")
                && !APIRequestRules.isRequestIdentifier(String(repeating: "x", count: 129)))
        #expect(
            APIRequestRules.isStorefrontCountryCode("USA") && !APIRequestRules.isStorefrontCountryCode("usa")
                && !APIRequestRules.isStorefrontCountryCode("US"))
        let now = Date()
        #expect(APIRequestRules.refusal(of: .init(startDate: now, endDate: now))?.code == .startDateAfterEndDate)
        #expect(
            APIRequestRules.refusal(of: .init(startDate: now, endDate: now + 1, notificationType: .refund, transactionId: "1"))?.code
                == .multipleFiltersSupplied)
        #expect(
            APIRequestRules.refusal(of: .init(startDate: now, endDate: now + 1, notificationSubtype: .voluntary))?.code == .invalidNotificationType)
        #expect(APIRequestRules.refusal(of: .init(startDate: now, endDate: now + 1, transactionId: "x"))?.code == .invalidTransactionId)
        #expect(APIRequestRules.refusal(of: .init(startDate: now, endDate: now + 1, onlyFailures: true)) == nil)
    }
}
