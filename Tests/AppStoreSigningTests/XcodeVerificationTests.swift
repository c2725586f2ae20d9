import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

@Suite("Xcode StoreKit testing: signed data verified against the pinned Xcode certificate")
struct XcodeVerificationTests {
    static func fixture(_ name: String) throws -> String {
        try String(contentsOf: SharedCorpus.appleReceipts.appendingPathComponent(name), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The certificate in the fixture's `x5c` (what Xcode's "Save Public Certificate" exports).
    static func xcodeCertificate() throws -> Certificate {
        let jws = try fixture("xcode-signed-transaction")
        let header = try #require(jws.split(separator: ".").first)
        var base64 = header.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        let json = try JSONSerialization.jsonObject(with: try #require(Data(base64Encoded: base64))) as? [String: Any]
        let x5c = try #require(json?["x5c"] as? [String])
        return try Certificate(derEncoded: Array(try #require(Data(base64Encoded: x5c[0]))))
    }

    static let bundle = "com.example.naturelab.backyardbirds.example"

    @Test("Apple's Xcode-signed transaction, renewal info and app transaction verify against the pinned certificate, fractional dates included")
    func pinned() async throws {
        let certificate = try Self.xcodeCertificate()
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        #expect(
            SHA256.hash(data: serializer.serializedBytes).map { String(format: "%02x", $0) }.joined()
                == "16c47dfe09825de02ac3fa40126ee5f81747941955fbc18a7696a6246a733c7a")
        let verifier = SignedDataVerifier(configuration: try .xcode(bundleID: Self.bundle, certificate: certificate))
        let transaction = try await verifier.verifyTransaction(try Self.fixture("xcode-signed-transaction")).payload
        #expect(transaction.transactionId == "0" && transaction.originalTransactionId == "0" && transaction.productId == "pass.premium")
        #expect(transaction.subscriptionGroupIdentifier == "6F3A93AB" && transaction.storefront == "USA" && transaction.storefrontId == "143441")
        #expect(transaction.environment == .xcode && transaction.offerType?.rawValue == 1)
        #expect(transaction.purchaseDate.timeIntervalSince1970 > 1_697_679_936 && transaction.purchaseDate.timeIntervalSince1970 < 1_697_679_937)
        _ = try await verifier.verifyRenewalInfo(try Self.fixture("xcode-signed-renewal-info"))
        let app = try await verifier.verifyAppTransaction(try Self.fixture("xcode-signed-app-transaction")).payload
        #expect(app.bundleId == Self.bundle)
    }

    @Test("refused: a tampered payload, another pinned certificate, another bundle ID, and any App Store configuration")
    func refused() async throws {
        let certificate = try Self.xcodeCertificate()
        let jws = try Self.fixture("xcode-signed-transaction")
        let parts = jws.split(separator: ".").map(String.init)
        var payload = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while payload.count % 4 != 0 { payload += "=" }
        let text = String(decoding: try #require(Data(base64Encoded: payload)), as: UTF8.self).replacingOccurrences(
            of: "pass.premium", with: "pass.premiun")
        let tampered = [
            parts[0],
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: ""), parts[2],
        ].joined(separator: ".")
        let verifier = SignedDataVerifier(configuration: try .xcode(bundleID: Self.bundle, certificate: certificate))
        await #expect {
            try await verifier.verifyTransaction(tampered)
        } throws: { ($0 as? VerificationError)?.code == .invalidSignature }
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("StoreKit Testing in Xcode") }
        let other = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: Date(), notValidAfter: Date() + 3_600,
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: Certificate.Extensions {}, issuerPrivateKey: .init(key))
        let otherVerifier = SignedDataVerifier(configuration: try .xcode(bundleID: Self.bundle, certificate: other))
        await #expect {
            try await otherVerifier.verifyTransaction(jws)
        } throws: { ($0 as? VerificationError)?.code == .untrustedRoot && "\($0)".contains("not the configured Xcode certificate") }
        let wrongApp = SignedDataVerifier(configuration: try .xcode(bundleID: "com.example.other", certificate: certificate))
        await #expect {
            try await wrongApp.verifyTransaction(jws)
        } throws: { ($0 as? VerificationError)?.code == .bundleIDMismatch }
        for environment in [AppStoreEnvironment.sandbox, .production] {
            let appStore = SignedDataVerifier(
                configuration: try .init(bundleID: Self.bundle, appAppleID: 1, environment: environment, trustedRoots: [.appleRootCAG3, certificate]))
            await #expect {
                try await appStore.verifyTransaction(jws)
            } throws: { ($0 as? VerificationError)?.code == .wrongCertificateCount }
        }
    }
}
