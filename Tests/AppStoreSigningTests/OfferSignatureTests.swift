import AppStoreSigning
import Crypto
import Foundation
import StorekeeperTesting
import Testing

@Suite("Offer signatures: V1 and signed-request JWS, checked by independent verifiers")
struct OfferSignatureTests {
    /// Apple's published test key (the conformance corpus's `testSigningKey.p8`).
    static func appleTestKey(bundleId: String = "com.example.storekeeper") throws -> AppStoreAPIKey {
        let pem = try String(contentsOf: SharedCorpus.appleReceipts.appendingPathComponent("testSigningKey.p8"), encoding: .utf8)
        return try AppStoreAPIKey(issuerID: "issuer-1", keyID: "KEY123", bundleID: bundleId, privateKeyPEM: pem)
    }

    @Test("the V1 payload is Apple's vector: 111 bytes, SHA-256 8c7c02a3…; fields joined by U+2063, token and nonce lowercased")
    func appleVector() throws {
        let payload = OfferSignatures.payloadV1(
            bundleId: "bundleId", keyId: "keyId", productId: "productId", offerId: "offerId", appAccountToken: "appAccountToken",
            nonce: "20FBA8A0-2B80-4A7D-A17F-85C1854727F8", timestamp: 1_698_148_900_000)
        #expect(payload.count == 111)
        #expect(
            SHA256.hash(data: payload).map { String(format: "%02x", $0) }.joined()
                == "8c7c02a364d7196e9c88815aeecb5e130fd00132172defbb54a75ef9807360ee")
        #expect(payload.contains(0xE2) && String(decoding: payload, as: UTF8.self).contains("\u{2063}20fba8a0-2b80-4a7d-a17f-85c1854727f8\u{2063}"))
    }

    @Test("V1 and every JWS kind verify with Python's cryptography and PyJWT; the public key is Apple's published one")
    func independentVerifiers() async throws {
        let key = try Self.appleTestKey()
        #expect(
            key.publicKey.derRepresentation.base64EncodedString()
                == "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErPJyxEu2/oKCrJaaTVTrq39DKJ2XcN6W+k8UvGf+Y/lDWNbFitQocabsDUvSN0edHH3UKP5QPTz4cOlyIPMrXQ==")
        guard ExternalTool.succeeds(["python3", "-c", "import jwt, cryptography"]) else {
            print("skipped: PyJWT and cryptography are not installed (.ci/run installs them)")
            return
        }
        let at = Date(timeIntervalSince1970: 1_780_000_000.5)
        let token = "3F2504E0-4F89-11D3-9A0C-0305E82C3301"
        let v1 = try OfferSignatures.signV1(key: key, productId: "pro.monthly", offerId: "winback.50", appAccountToken: token, at: at)
        #expect(v1.nonce == v1.nonce.lowercased() && v1.timestamp == 1_780_000_000_500 && v1.keyIdentifier == "KEY123")
        #expect(Data(base64Encoded: v1.signature)?.first == 0x30, "DER, base64")
        let v1NoToken = try OfferSignatures.signV1(key: key, productId: "pro.monthly", offerId: "winback.50", appAccountToken: nil, at: at)
        let offer = try OfferSignatures.promotionalOfferJWS(
            key: key, productId: "pro.monthly", offerIdentifier: "winback.50", transactionId: "2000000000000001", at: at)
        let offerNoTransaction = try OfferSignatures.promotionalOfferJWS(
            key: key, productId: "pro.monthly", offerIdentifier: "winback.50", transactionId: nil, at: at)
        let intro = try OfferSignatures.introductoryOfferEligibilityJWS(
            key: key, productId: "pro.monthly", allowIntroductoryOffer: false, transactionId: "2000000000000001", at: at)
        let commerce = try OfferSignatures.advancedCommerceJWS(
            key: key, requestJSON: Array(#"{"operation":"CREATE_SUBSCRIPTION","version":"1"}"#.utf8), at: at)
        let common: [String: Any] = ["iss": "issuer-1", "bid": "com.example.storekeeper", "iat": 1_780_000_000]
        func claims(_ more: [String: Any]) -> [String: Any] { common.merging(more) { $1 } }
        let cases: [[String: Any]] = [
            [
                "kind": "v1", "signature": v1.signature,
                "payload": ["com.example.storekeeper", "KEY123", "pro.monthly", "winback.50", token.lowercased(), v1.nonce, String(v1.timestamp)],
            ],
            [
                "kind": "v1", "signature": v1NoToken.signature,
                "payload": ["com.example.storekeeper", "KEY123", "pro.monthly", "winback.50", "", v1NoToken.nonce, String(v1NoToken.timestamp)],
            ],
            [
                "kind": "jws", "jws": offer, "kid": "KEY123", "audience": "promotional-offer",
                "claims": claims(["productId": "pro.monthly", "offerIdentifier": "winback.50", "transactionId": "2000000000000001"]),
            ],
            [
                "kind": "jws", "jws": offerNoTransaction, "kid": "KEY123", "audience": "promotional-offer",
                "claims": claims(["productId": "pro.monthly", "offerIdentifier": "winback.50"]),
            ],
            [
                "kind": "jws", "jws": intro, "kid": "KEY123", "audience": "introductory-offer-eligibility",
                "claims": claims(["productId": "pro.monthly", "allowIntroductoryOffer": false, "transactionId": "2000000000000001"]),
            ],
            [
                "kind": "jws", "jws": commerce, "kid": "KEY123", "audience": "advanced-commerce-api",
                "claims": claims(["request": Data(#"{"operation":"CREATE_SUBSCRIPTION","version":"1"}"#.utf8).base64EncodedString()]),
            ],
        ]
        let directory = TestFiles.directory.appendingPathComponent("offers-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let casesFile = directory.appendingPathComponent("cases.json")
        try JSONSerialization.data(withJSONObject: cases).write(to: casesFile)
        let keyFile = directory.appendingPathComponent("public.pem")
        try key.publicKey.pemRepresentation.write(to: keyFile, atomically: true, encoding: .utf8)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Verifiers/verify_offers.py").path
        let result = try await ExternalTool.run(["python3", script, casesFile.path, keyFile.path])
        #expect(result.passed, "\(result.output)")
        #expect(result.output.components(separatedBy: "\nok ").count + (result.output.hasPrefix("ok ") ? 0 : -1) == cases.count, "\(result.output)")

        // A changed field no longer verifies (the verifier is not a rubber stamp).
        var tampered = cases[0]
        tampered["payload"] = ["com.example.storekeeper", "KEY123", "pro.yearly", "winback.50", token.lowercased(), v1.nonce, String(v1.timestamp)]
        try JSONSerialization.data(withJSONObject: [tampered]).write(to: casesFile)
        let refused = try await ExternalTool.run(["python3", script, casesFile.path, keyFile.path])
        #expect(!refused.passed && refused.output.contains("FAILED"), "\(refused.output)")
    }

    @Test("empty fields and a request that is not a JSON object are refused by name")
    func refusals() throws {
        let key = try Self.appleTestKey()
        #expect {
            try OfferSignatures.signV1(key: key, productId: "", offerId: "o", appAccountToken: nil)
        } throws: { ($0 as? SigningError)?.code == .missingCredential && "\($0)".contains("productId is empty") }
        #expect {
            try OfferSignatures.introductoryOfferEligibilityJWS(key: key, productId: "p", allowIntroductoryOffer: true, transactionId: "")
        } throws: { ($0 as? SigningError)?.code == .missingCredential && "\($0)".contains("transactionId") }
        #expect {
            try OfferSignatures.advancedCommerceJWS(key: key, requestJSON: Array("[1]".utf8))
        } throws: { ($0 as? SigningError)?.code == .encodingFailed }
        // "a⁣b" + "o" and "a" + "b⁣o" would sign the same text: the separator is refused in every field.
        #expect {
            try OfferSignatures.signV1(key: key, productId: "a\u{2063}b", offerId: "o", appAccountToken: nil)
        } throws: { "\($0)".contains("productId contains U+2063") }
        #expect {
            try OfferSignatures.signV1(key: key, productId: "p", offerId: "o", appAccountToken: "t\u{2063}")
        } throws: { "\($0)".contains("appAccountToken contains U+2063") }
    }
}
