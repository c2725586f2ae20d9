import Crypto
import Foundation
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

@testable import AppStoreReceipts

@Suite("App receipts: parsed, signature and chain verified, every failure named")
struct ReceiptTests {
    static func fixture(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: SharedCorpus.appleReceipts.appendingPathComponent(name)))
    }

    static func date(_ text: String) -> Date { try! Date(text, strategy: .iso8601) }

    /// The INDEX's real sandbox receipts: file, bundle ID, creation date, in-app entries, first entry's 1703 and 1705.
    struct Real: Sendable, CustomTestStringConvertible {
        var file, bundleId, created: String
        var entries: Int
        var transactionId, originalTransactionId: String?
        var testDescription: String { file }
    }

    static let real: [Real] = [
        Real(
            file: "sandbox-2015-revenuecat-mbaasy.b64", bundleId: "com.mbaasy.ios.demo", created: "2015-08-13T07:50:46Z", entries: 7,
            transactionId: "1000000166865231", originalTransactionId: "1000000166865231"),
        Real(
            file: "sandbox-2016-tpiar-golfwang.b64", bundleId: "com.whalerock.golfwang", created: "2016-08-27T06:06:32Z", entries: 9,
            transactionId: "1000000232253043", originalTransactionId: "1000000232253022"),
        Real(
            file: "sandbox-2018-revenuecat-belive.b64", bundleId: "com.belive.app.ios", created: "2018-11-13T16:46:31Z", entries: 1,
            transactionId: "1000000472106082", originalTransactionId: "1000000472106082"),
        Real(
            file: "sandbox-2020-tpiar-legacy187.b64", bundleId: "com.nutcall.alert", created: "2020-05-06T18:28:49Z", entries: 187,
            transactionId: "1000000637840752", originalTransactionId: "1000000603177571"),
        Real(file: "sandbox-2020-tpiar-pdfify-macos.b64", bundleId: "de.holtwick.mac.PDFify", created: "2020-10-30T10:54:04Z", entries: 0),
        Real(file: "sandbox-2023-tpiar-g7.b64", bundleId: "com.tikhop.tpinappreceipt", created: "2023-06-21T10:33:41Z", entries: 0),
        Real(
            file: "sandbox-2025-tpiar-g5.b64", bundleId: "dev.bonzer.weeka.app", created: "2025-12-26T18:39:47Z", entries: 2,
            transactionId: "2000001092134138", originalTransactionId: "2000001092134138"),
    ]

    @Test("every real sandbox receipt verifies at its creation date, to the pinned 2006 Apple root, with the INDEX's fields", arguments: real)
    func realReceipts(_ sample: Real) throws {
        let verified = try ReceiptVerifier().verify(try Self.fixture(sample.file))
        #expect(verified.signedBy == "app-store")
        #expect(verified.receipt.receiptType == "ProductionSandbox")
        #expect(verified.receipt.bundleId == sample.bundleId)
        #expect(verified.receipt.creationDate == Self.date(sample.created) && verified.judgedAt == Self.date(sample.created))
        #expect(verified.receipt.inAppPurchases.count == sample.entries)
        #expect(verified.receipt.inAppPurchases.first?.transactionId == sample.transactionId)
        #expect(verified.receipt.inAppPurchases.first?.originalTransactionId == sample.originalTransactionId)
        #expect(verified.receipt.transactionIdForHistory == sample.originalTransactionId)
    }

    @Test("judged today, every real receipt fails with a named expiry; judged by another root, with an untrusted chain", arguments: real)
    func expiredAndOtherRoot(_ sample: Real) throws {
        let bytes = try Self.fixture(sample.file)
        let today = Self.date("2026-11-27T00:00:00Z")
        #expect {
            try ReceiptVerifier().verify(bytes, at: .now, now: today)
        } throws: { ($0 as? ReceiptError)?.code == .certificateExpired && "\($0)".contains("not at 2026-11-27") }
        let g3 = try Certificate(derEncoded: Array(try Data(contentsOf: SharedCorpus.directory.appendingPathComponent("data/AppleRootCA-G3.cer"))))
        #expect {
            try ReceiptVerifier(roots: [g3]).verify(bytes)
        } throws: { ($0 as? ReceiptError)?.code == .untrustedChain }
    }

    /// The certificate an Xcode receipt carries (what Xcode's "Save Public Certificate" exports).
    static func embeddedCertificate(_ name: String) throws -> Certificate {
        try #require(try ReceiptParser.parse(try fixture(name)).certificates.first)
    }

    @Test("Xcode receipts verify only against the pinned StoreKit certificate; their fields read as Apple's tests expect")
    func xcodeReceipts() throws {
        let certificate = try Self.embeddedCertificate("xcode-app-receipt-with-transaction")
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        let fingerprint = SHA256.hash(data: serializer.serializedBytes).map { String(format: "%02X", $0) }.joined(separator: ":")
        #expect(fingerprint == "FF:0B:A3:6E:72:1D:2D:B7:41:D2:AA:11:E6:11:2E:F7:8B:F7:13:1B:46:C7:F0:35:B0:08:91:D0:45:C8:64:FE")
        let pinned = ReceiptVerifier(xcodeCertificate: certificate)
        let verified = try pinned.verify(try Self.fixture("xcode-app-receipt-with-transaction"))
        #expect(verified.signedBy == "xcode" && verified.receipt.receiptType == "Xcode")
        #expect(verified.receipt.bundleId == "com.example.naturelab.backyardbirds.example" && verified.receipt.applicationVersion == "1")
        let purchase = try #require(verified.receipt.inAppPurchases.first)
        #expect(verified.receipt.inAppPurchases.count == 1 && purchase.transactionId == "0" && purchase.originalTransactionId == nil)
        #expect(purchase.productId == "pass.premium" && purchase.quantity == 1 && purchase.isInIntroOfferPeriod == true)
        #expect(purchase.purchaseDate == Self.date("2023-10-19T01:45:36Z") && purchase.expiresDate == Self.date("2023-11-19T01:45:36Z"))
        #expect(verified.receipt.transactionIdForHistory == "0")
        let empty = try pinned.verify(try Self.fixture("xcode-app-receipt-empty"))
        #expect(empty.receipt.inAppPurchases.isEmpty && empty.receipt.transactionIdForHistory == nil, "no purchase is a typed result")
        // Without the pinned certificate, or with another: refused.
        #expect {
            try ReceiptVerifier().verify(try Self.fixture("xcode-app-receipt-with-transaction"))
        } throws: { ($0 as? ReceiptError)?.code == .untrustedChain }
        let other = try Self.embeddedCertificate("xcode-app-receipt-tpinappreceipt.b64")
        if other != certificate {
            #expect {
                try ReceiptVerifier(xcodeCertificate: other).verify(try Self.fixture("xcode-app-receipt-with-transaction"))
            } throws: { ($0 as? ReceiptError)?.code == .untrustedChain }
        }
        // TPInAppReceipt's Xcode receipt: valid against its own certificate, never to Apple's root.
        let own = try ReceiptVerifier(xcodeCertificate: other).verify(try Self.fixture("xcode-app-receipt-tpinappreceipt.b64"))
        #expect(own.signedBy == "xcode" && !own.receipt.inAppPurchases.isEmpty)
        #expect {
            try ReceiptVerifier().verify(try Self.fixture("xcode-app-receipt-tpinappreceipt.b64"))
        } throws: { ($0 as? ReceiptError)?.code == .untrustedChain }
    }

    @Test("a receipt changed, re-signed, a JWS, garbage, an empty input and a 10 MB blob are refused with their named error")
    func refusals() throws {
        let real = try ReceiptParser.bytes(of: try Self.fixture("sandbox-2018-revenuecat-belive.b64"))
        // The bundle ID changed by one letter: the signature no longer matches.
        let bundle = Array("com.belive.app.ios".utf8)
        let at = try #require((0...(real.count - bundle.count)).first { Array(real[$0..<($0 + bundle.count)]) == bundle })
        var changed = real
        changed[at] = UInt8(ascii: "k")
        #expect {
            try ReceiptVerifier().verify(changed, at: .creation)
        } throws: { ($0 as? ReceiptError)?.code == .signatureInvalid }
        // The signature's last byte changed (another key's signature is as wrong as a damaged one).
        let parsed = try ReceiptParser.parse(real)
        let signature = parsed.signer.signature
        let place = try #require((0...(real.count - signature.count)).last { Array(real[$0..<($0 + signature.count)]) == signature })
        var resigned = real
        resigned[place + signature.count - 1] ^= 0x01
        #expect {
            try ReceiptVerifier().verify(resigned)
        } throws: { ($0 as? ReceiptError)?.code == .signatureInvalid }
        // A certificate's public key algorithm changed to an unknown OID: said in words, not swift-certificates' dump.
        let rsaEncryption: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01]
        let key = try #require((0...(real.count - rsaEncryption.count)).first { Array(real[$0..<($0 + rsaEncryption.count)]) == rsaEncryption })
        var unknownKey = real
        unknownKey[key + rsaEncryption.count - 1] = 0x63
        #expect {
            try ReceiptVerifier().verify(unknownKey)
        } throws: { error in
            let refusal = error as? ReceiptError
            return refusal?.code == .notPKCS7
                && refusal?.message == "a certificate of the receipt does not parse: a public key algorithm that is not supported"
        }
        let jws = "eyJhbGciOiJFUzI1NiJ9.eyJ0cmFuc2FjdGlvbklkIjoiMSJ9.c2lnbmF0dXJl"
        for (input, code) in [
            (Array(jws.utf8), ReceiptError.Code.jwsGiven), (Array("not a receipt!".utf8), .notBase64), ([], .notBase64),
            (Array("MIIBAAAA".utf8), .notPKCS7), (Array(Data("hello world".utf8).base64EncodedString().utf8), .notPKCS7),
            ([UInt8](repeating: 0x30, count: 10_000_000), .tooLarge),
            (Array([UInt8](repeating: 0x41, count: 10_000_000)), .tooLarge),
        ] {
            #expect {
                try ReceiptVerifier().verify(input)
            } throws: { ($0 as? ReceiptError)?.code == code }
        }
    }

    @Test("random mutations of real receipts never crash or hang: each parses or is refused with a named error")
    func fuzz() throws {
        var generator = SystemRandomNumberGenerator()
        let seeds = try ["sandbox-2018-revenuecat-belive.b64", "sandbox-2025-tpiar-g5.b64", "xcode-app-receipt-with-transaction"].map {
            try ReceiptParser.bytes(of: try Self.fixture($0))
        }
        let started = Date()
        var refused = 0
        for round in 0..<3_000 {
            var bytes = seeds[round % seeds.count]
            switch round % 3 {
            case 0:
                for _ in 0..<Int.random(in: 1...8, using: &generator) {
                    bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
                }
            case 1: bytes = Array(bytes.prefix(Int.random(in: 0..<bytes.count, using: &generator)))
            default:
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                bytes.insert(contentsOf: (0..<Int.random(in: 1...16, using: &generator)).map { _ in UInt8.random(in: 0...255) }, at: at)
            }
            do {
                _ = try ReceiptVerifier().verify(bytes)
            } catch {
                refused += 1
            }
        }
        #expect(refused > 2_500, "almost every mutation is refused (\(refused))")
        #expect(Date().timeIntervalSince(started) < 120, "no mutation hangs the parser")
    }

    @Test("a legacy transaction receipt gives its transaction-id; a malformed one is refused by name")
    func legacy() throws {
        #expect(try LegacyTransactionReceipt.transactionId(try Self.fixture("legacyTransaction")) == "33993399")
        let noInfo = Data(#"{"signature" = "abc";}"#.utf8).base64EncodedString()
        #expect {
            try LegacyTransactionReceipt.transactionId(Array(noInfo.utf8))
        } throws: { ($0 as? ReceiptError)?.code == .malformedLegacyReceipt }
        let badId = Data(#"{"purchase-info" = "\#(Data(#"{"transaction-id" = "12ab";}"#.utf8).base64EncodedString())";}"#.utf8).base64EncodedString()
        #expect {
            try LegacyTransactionReceipt.transactionId(Array(badId.utf8))
        } throws: { ($0 as? ReceiptError)?.code == .malformedLegacyReceipt }
        #expect {
            try LegacyTransactionReceipt.transactionId(Array("%%%".utf8))
        } throws: { ($0 as? ReceiptError)?.code == .notBase64 }
    }
}

@Suite("App receipts: dates")
struct ReceiptDateTests {
    @Test("receipts' dates read by hand equal Foundation's reading, across eras, leap days and the year 4001")
    func utcDates() throws {
        for text in [
            "2015-08-13T07:50:46Z", "2020-02-29T23:59:59Z", "1970-01-01T00:00:00Z", "2000-03-01T00:00:00Z", "1969-12-31T23:59:59Z",
            "4001-01-01T00:00:00Z", "2025-12-26T18:39:47Z",
        ] {
            let expected = try Date(text, strategy: .iso8601)
            #expect(ReceiptParser.utcDate(Array(text.utf8)) == expected, "\(text)")
        }
        for text in ["2015-13-13T07:50:46Z", "2015-08-13 07:50:46Z", "2015-08-13T07:50:46", "2015-08-13T07:50:46+01:00", "abcd-08-13T07:50:46Z"] {
            #expect(ReceiptParser.utcDate(Array(text.utf8)) == nil, "\(text)")
        }
    }
}
