import AppStoreModels
import Foundation
import Hummingbird
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: the customer answer's JSON writer")
struct CustomerViewJSONTests {
    /// Every ASCII character (controls included), non-ASCII letters, an emoji, and JSON's own punctuation.
    static let awkward: [String] = [
        String(decoding: (0..<128).map { UInt8($0) }, as: UTF8.self),
        "pro/monthly \"quoted\" back\\slash", "été-Ünïcode", "🎉 launch", "", " ", "a\u{7F}b\u{2028}c",
    ]

    static func view(strings: [String]) throws -> CustomerAnswer {
        let entitlements: [[String: Any]] = strings.enumerated().map { index, text in
            var entitlement: [String: Any] = [
                "entitlement": text, "productId": text + "/p", "productType": text, "ownership": text,
                "inGracePeriod": index > 2, "inBillingRetry": index < 2, "transactionId": String(index),
                "originalTransactionId": text, "source": text,
            ]
            if index.isMultiple(of: 2) { entitlement["expiresDate"] = 1_800_000_000_123 + index }
            if !index.isMultiple(of: 3) { entitlement["willRenew"] = index.isMultiple(of: 2) }
            return entitlement
        }
        // Keys that sort differently by UTF-8 bytes, by Unicode order and by case-insensitive order.
        var balance = Dictionary(uniqueKeysWithValues: strings.enumerated().map { ($1, $0 - 3) })
        for key in ["B", "a", "b", "A", "ä", "z", "Z", "10", "9", "a.b", "a-b", "ab"] { balance[key] = Int.max - key.utf8.count }
        balance["min"] = Int.min
        let state = try AppStoreJSON.makeDecoder().decode(
            CustomerState.self,
            from: JSONSerialization.data(
                withJSONObject: [
                    "customerId": strings.joined(), "environment": "Sandbox", "entitlements": entitlements, "entitledProductIds": [String](),
                    "consumableBalance": balance,
                ] as [String: Any]))
        return CustomerAnswer(state: state, ledger: Ledger(), bundleId: strings.reversed().joined(separator: "/"), validUntil: nil)
    }

    @Test("awkward strings, keys and numbers: byte for byte what JSONEncoder writes")
    func awkwardStrings() throws {
        let view = try Self.view(strings: Self.awkward)
        #expect(String(buffer: view.json()).contains("\"transactionId\":\"\(Self.awkward.count - 1)\""))
        let reference = try AppStoreJSON.makeEncoder().encode(view)
        let written = view.json()
        #expect(String(buffer: written) == String(decoding: reference, as: UTF8.self))
        // And it is JSON that reads back to the same strings.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(String(buffer: written).utf8)) as? [String: Any])
        #expect(object["customerId"] as? String == Self.awkward.joined())
    }

    @Test("an empty customer: empty arrays and objects")
    func empty() throws {
        let view = try Self.view(strings: [])
        #expect(String(buffer: view.json()) == String(decoding: try AppStoreJSON.makeEncoder().encode(view), as: UTF8.self))
    }
}
