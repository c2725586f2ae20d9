import Foundation
import Testing

@testable import AppStoreModels

/// The hand-written decoders of transactions and renewal infos: whatever they return is what `JSONDecoder` returns
/// for the same bytes, and anything outside their plain shape goes to `JSONDecoder`.
@Suite("Payload decoding (the read path's fast decoders)")
struct PayloadDecodingTests {
    static let decoder = AppStoreJSON.makeDecoder()

    static let everyScalarTransactionField = #"""
        {"transactionId":"2","originalTransactionId":"1","webOrderLineItemId":"3","bundleId":"b","productId":"p",
         "subscriptionGroupIdentifier":"g","purchaseDate":1700000000000,"originalPurchaseDate":1690000000000,
         "expiresDate":1710000000000,"quantity":2,"type":"Future Product Type","appAccountToken":"7A0AC2A4-3d9b-4d3c-9e55-0f2a8f0d7c11",
         "inAppOwnershipType":"BORROWED","signedDate":1700000000123,"revocationReason":7,"revocationDate":1700000001000,
         "revocationType":"REFUND_PARTIAL_FUTURE","revocationPercentage":50000,"isUpgraded":true,"offerType":9,
         "offerIdentifier":"o","offerDiscountType":"NEW_DISCOUNT","offerPeriod":"P1M","environment":"Staging",
         "storefront":"USA","storefrontId":"143441","transactionReason":"GIFT","price":-1990,"currency":"USD",
         "appTransactionId":"704","previousOriginalTransactionId":"0","billingPlanType":"QUARTERLY",
         "deviceVerification":"AAAA","deviceVerificationNonce":"29beb115-5689-457e-82e6-5658775c15ec","futureField":"x"}
        """#

    static let everyScalarRenewalField = #"""
        {"originalTransactionId":"1","productId":"p","autoRenewProductId":"q","autoRenewStatus":2,"expirationIntent":6,
         "isInBillingRetryPeriod":false,"priceIncreaseStatus":1,"gracePeriodExpiresDate":1700000000007,"offerType":4,
         "offerIdentifier":"wb","offerDiscountType":"FREE_TRIAL","offerPeriod":"P1W","signedDate":1700000000001,
         "environment":"Sandbox","recentSubscriptionStartDate":1600000000000,"renewalDate":1700000002000,"currency":"EUR",
         "renewalPrice":4990,"appAccountToken":"00000000-0000-0000-0000-000000000051","appTransactionId":"704",
         "renewalBillingPlanType":"MONTHLY","commitmentAutoRenewProductId":"p","commitmentAutoRenewStatus":1,
         "commitmentRenewalBillingPlanType":"MONTHLY","commitmentRenewalDate":1710000000000,"commitmentRenewalPrice":990,
         "futureNumber":-1.5e+3,"futureFlag":null}
        """#

    static func describe<T>(_ json: Data, _ decoded: Result<T, any Error>) -> String {
        let text = String(decoding: json, as: UTF8.self).replacingOccurrences(of: "\n", with: "")
        if case .failure(let error) = decoded { return "\(text) — JSONDecoder: \(error)" }
        return text
    }

    /// Decodes `json` both ways; the fast path's value, if it took it, must be `JSONDecoder`'s.
    @discardableResult
    static func agrees<Value: Decodable & Equatable>(
        _ json: Data, _ flat: (UnsafeRawBufferPointer) throws -> Value, _ combined: (Data, JSONDecoder) throws -> Value
    ) -> Bool {
        let decoded = Result { try decoder.decode(Value.self, from: json) }
        let reference = try? decoded.get()
        let fast = try? json.withUnsafeBytes(flat)
        if let fast { #expect(fast == reference, "\(describe(json, decoded))") }
        switch (decoded, Result { try combined(json, decoder) }) {
        case (.success(let expected), .success(let value)): #expect(value == expected)
        case (.failure(let expected), .failure(let error)): #expect("\(error)" == "\(expected)")
        case (_, let result): Issue.record("JSONDecoder gave \(decoded), the combined decoder \(result)")
        }
        return fast != nil
    }

    @discardableResult
    static func transactionAgrees(_ json: Data) -> Bool { agrees(json, TransactionInfo.decodeFlat, TransactionInfo.init(json:fallback:)) }

    @discardableResult
    static func renewalAgrees(_ json: Data) -> Bool { agrees(json, RenewalInfo.decodeFlat, RenewalInfo.init(json:fallback:)) }

    @Test("every scalar field, and members it does not know, decode on the fast path as JSONDecoder decodes them")
    func everyField() throws {
        #expect(Self.transactionAgrees(Data(Self.everyScalarTransactionField.utf8)))
        #expect(Self.renewalAgrees(Data(Self.everyScalarRenewalField.utf8)))
        let info = try TransactionInfo(json: Data(Self.everyScalarTransactionField.utf8), fallback: Self.decoder)
        #expect(info.price == -1990 && info.isUpgraded == true && info.appAccountToken?.description == "7a0ac2a4-3d9b-4d3c-9e55-0f2a8f0d7c11")
        #expect(info.purchaseDate == Date(epochMilliseconds: 1_700_000_000_000) && info.type.rawValue == "Future Product Type")
        let renewal = try RenewalInfo(json: Data(Self.everyScalarRenewalField.utf8), fallback: Self.decoder)
        #expect(renewal.isInBillingRetryPeriod == false && renewal.renewalPrice == 4990 && renewal.offerType == .winBack)
    }

    @Test("every transaction and renewal info of Apple's signed samples decodes as JSONDecoder decodes it, most on the fast path")
    func corpus() throws {
        var fast = 0, total = 0
        for payload in CorpusPayloads.all where payload.kind == "transaction" || payload.kind == "renewalinfo" {
            total += 1
            if payload.kind == "transaction" ? Self.transactionAgrees(payload.json) : Self.renewalAgrees(payload.json) { fast += 1 }
        }
        #expect(total > 20)
        #expect(fast == total, "\(fast) of \(total) on the fast path")
    }

    /// Edge cases, and whether the fast path reads them (`false`: it leaves them to JSONDecoder).
    static let edgeCases: [(json: String, fast: Bool)] = [
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","commitmentInfo":{"billingPeriodNumber":1}}"#,
            false
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","x":[1,{"a":null}]}"#,
            false
        ),
        (#"{"transactionId":"\u0032\n","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable"}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1.5,"type":"Consumable"}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1e3,"type":"Consumable"}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":01,"type":"Consumable"}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":-0,"type":"Consumable"}"#, true),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","quantity":99999999999999999999}"#,
            false
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","price":-9223372036854775808}"#,
            true
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","price":9223372036854775808}"#,
            false
        ),
        (
            #"{"transactionId":"2","transactionId":"3","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable"}"#,
            false
        ),
        (#"{"transactionId":null,"originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable"}"#, false),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","quantity":null,"isUpgraded":null}"#,
            true
        ),
        (#"{"originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable"}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable"} x"#, false),
        (#" {"transactionId" : "2" ,"originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable"}  "#, true),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","quantity":"2"}"#,
            false
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","isUpgraded":1}"#,
            false
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","appAccountToken":"not-a-uuid"}"#,
            false
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","offerType":"1"}"#,
            false
        ),
        (
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","storefront":"Ünïcødé 🎉"}"#,
            true
        ),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable",}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","u":nul}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","u":1.}"#, false),
        (#"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","u":-}"#, false),
        (#"[]"#, false),
        (#""#, false),
        (#"{}"#, false),
        (#"{"#, false),
        (#"null"#, false),
    ]

    @Test(
        "edge cases decode to JSONDecoder's value or fail with JSONDecoder's error; the fast path reads exactly the plain ones",
        arguments: 0..<edgeCases.count)
    func edgeCase(index: Int) throws {
        let (json, fast) = Self.edgeCases[index]
        #expect(Self.transactionAgrees(Data(json.utf8)) == fast, "\(json)")
    }

    @Test(
        "renewal infos with nested members or a missing or null required member go to JSONDecoder",
        arguments: [
            #"{"originalTransactionId":"1","eligibleWinBackOfferIds":["a"]}"#,
            #"{"originalTransactionId":"1","commitmentInfo":{"commitmentRenewalPrice":990}}"#,
            #"{"originalTransactionId":"1","advancedCommerceInfo":{"k":[true]}}"#,
            #"{"originalTransactionId":null,"productId":"p"}"#,
            #"{"productId":"p"}"#,
        ])
    func renewalOutsideTheFastPath(json: String) {
        #expect(!Self.renewalAgrees(Data(json.utf8)))
    }

    @Test("a fallback decoder that reads dates or keys otherwise decodes everything itself")
    func otherDecoders() throws {
        let json = Data(Self.everyScalarTransactionField.utf8)
        let plain = JSONDecoder()
        #expect(try TransactionInfo(json: json, fallback: plain) == plain.decode(TransactionInfo.self, from: json))
        #expect(try TransactionInfo(json: json, fallback: plain).purchaseDate != Date(epochMilliseconds: 1_700_000_000_000))
        let iso = AppStoreJSON.makeDecoder()
        iso.dateDecodingStrategy = .iso8601
        #expect(throws: DecodingError.self) { try TransactionInfo(json: json, fallback: iso) }
        let snake = AppStoreJSON.makeDecoder()
        snake.keyDecodingStrategy = .convertFromSnakeCase
        let renewal = Data(Self.everyScalarRenewalField.utf8)
        #expect(try RenewalInfo(json: renewal, fallback: snake) == snake.decode(RenewalInfo.self, from: renewal))
    }

    @Test("a key beyond ASCII is JSONDecoder's to match, even one that reads like a known key")
    func nonASCIIKeys() {
        // U+212A KELVIN SIGN is canonically equivalent to "K"; no known key has one today, and the rule must not depend on that.
        let kelvin =
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","\#u{212A}ind":"x"}"#
        #expect(!Self.transactionAgrees(Data(kelvin.utf8)))
        #expect(!Self.renewalAgrees(Data(#"{"originalTransactionId":"1","prodüct":"x"}"#.utf8)))
    }

    @Test("invalid UTF-8 and control characters in a string are JSONDecoder's to refuse")
    func invalidBytes() throws {
        let prefix = Array(
            #"{"transactionId":"2","originalTransactionId":"1","bundleId":"b","productId":"p","purchaseDate":1,"type":"Consumable","storefront":""#
                .utf8)
        for bad: [UInt8] in [[0xFF], [0xC3], [0xED, 0xA0, 0x80], [0x01], [0x0A]] {
            let json = Data(prefix + bad + Array(#""}"#.utf8))
            #expect(!Self.transactionAgrees(json))
        }
    }

    /// A small deterministic generator (SplitMix64), so that a failure can be replayed.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("4,000 mutated payloads: the fast path's value, whenever it takes one, is JSONDecoder's")
    func mutations() throws {
        var random = SplitMix(state: 20_261_124)
        let alphabet = Array(#"{}[]":,.-+eE0123456789 nultrfas\"#.utf8) + [0x00, 0x0A, 0xC3, 0xFF]
        var fastTaken = 0
        for round in 0..<4_000 {
            let renewal = round % 2 == 1
            var bytes = Array((renewal ? Self.everyScalarRenewalField : Self.everyScalarTransactionField).utf8)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let at = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0: bytes[at] = alphabet.randomElement(using: &random)!
                case 1: bytes.remove(at: at)
                case 2: bytes.insert(alphabet.randomElement(using: &random)!, at: at)
                default: bytes.removeLast(Int.random(in: 0...min(3, bytes.count - 1), using: &random))
                }
                if bytes.isEmpty { break }
            }
            if renewal ? Self.renewalAgrees(Data(bytes)) : Self.transactionAgrees(Data(bytes)) { fastTaken += 1 }
        }
        // Many mutations land in a value and leave valid JSON that the fast path reads; they must agree too.
        #expect(fastTaken > 400, "only \(fastTaken) mutated payloads took the fast path")
    }
}
