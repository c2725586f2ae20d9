import Crypto
import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreSigning

@Suite("App Store Server API auth token")
struct APIAuthTokenTests {
    static let privateKey = P256.Signing.PrivateKey()
    static let issuerID = "57246542-96fe-1a63-e053-0824d011072a"

    static func key(pem: String = privateKey.pemRepresentation) throws -> AppStoreAPIKey {
        try AppStoreAPIKey(issuerID: issuerID, keyID: "2X9R4HXF34", bundleID: "com.example.app", privateKeyPEM: pem)
    }

    static func parts(_ token: String) throws -> (header: [String: Any], claims: [String: Any], input: String, signature: [UInt8]) {
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        try #require(segments.count == 3)
        let header = try JSONSerialization.jsonObject(with: Data(try Base64URL.decode(segments[0].utf8))) as? [String: Any]
        let claims = try JSONSerialization.jsonObject(with: Data(try Base64URL.decode(segments[1].utf8))) as? [String: Any]
        return (try #require(header), try #require(claims), "\(segments[0]).\(segments[1])", try Base64URL.decode(segments[2].utf8))
    }

    @Test("the token has Apple's header and claims and its signature verifies with the public key")
    func shape() throws {
        let issued = Date(timeIntervalSince1970: 1_760_000_000.7)
        let key = try Self.key()
        let token = try APIAuthToken.make(key: key, issuedAt: issued, lifetime: 1800)
        let (header, claims, input, signature) = try Self.parts(token)
        #expect(header.count == 3)
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "2X9R4HXF34")
        #expect(header["typ"] as? String == "JWT")
        #expect(claims.count == 5)
        #expect(claims["iss"] as? String == Self.issuerID)
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_760_000_000)
        #expect((claims["exp"] as? NSNumber)?.int64Value == 1_760_001_800)
        #expect(claims["aud"] as? String == "appstoreconnect-v1")
        #expect(claims["bid"] as? String == "com.example.app")
        #expect(signature.count == 64)
        let ecdsa = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        #expect(Self.privateKey.publicKey.isValidSignature(ecdsa, for: Data(input.utf8)))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(ecdsa, for: Data(input.utf8)))
    }

    @Test("an issuer ID given in upper case is signed in lower case, as App Store Connect shows it; another value as given")
    func issuerCase() throws {
        let upper = try AppStoreAPIKey(
            issuerID: Self.issuerID.uppercased(), keyID: "2X9R4HXF34", bundleID: "com.example.app", privateKeyPEM: Self.privateKey.pemRepresentation)
        #expect(try Self.parts(try APIAuthToken.make(key: upper)).claims["iss"] as? String == Self.issuerID)
        let other = AppStoreAPIKey(issuerID: "Not-A-UUID", keyID: "2X9R4HXF34", bundleID: "com.example.app", privateKey: Self.privateKey)
        #expect(other.issuerID == "Not-A-UUID")
    }

    @Test("the default lifetime is 5 minutes; more than 60 minutes or none is refused", arguments: [0, -1, 3601, 86_400])
    func lifetime(seconds: Double) throws {
        let key = try Self.key()
        let error = #expect(throws: SigningError.self) { try APIAuthToken.make(key: key, lifetime: seconds) }
        #expect(error?.code == .invalidLifetime)
        let (_, claims, _, _) = try Self.parts(try APIAuthToken.make(key: key))
        let iat = try #require((claims["iat"] as? NSNumber)?.int64Value)
        #expect((claims["exp"] as? NSNumber)?.int64Value == iat + 300)
        let (_, longest, _, _) = try Self.parts(try APIAuthToken.make(key: key, lifetime: 3600))
        #expect((longest["exp"] as? NSNumber)!.int64Value - (longest["iat"] as? NSNumber)!.int64Value == 3600)
    }

    @Test(
        "as strict as Apple about time: iat one second ahead of the checker's clock is refused, iat now is not; exp at most 60 minutes after iat; expired is refused"
    )
    func timeChecks() throws {
        let key = try Self.key()
        let now = Date(timeIntervalSince1970: 1_790_000_000)
        func check(issued: Date, lifetime: TimeInterval = 300, at: Date = now) throws(APIAuthToken.Rejection) {
            _ = try APIAuthToken.verify(
                try! APIAuthToken.make(key: key, issuedAt: issued, lifetime: lifetime), keyID: "2X9R4HXF34", issuerID: Self.issuerID,
                publicKey: Self.privateKey.publicKey, now: at
            )
        }
        #expect(throws: APIAuthToken.Rejection(reason: "iat is in the future")) { try check(issued: now.addingTimeInterval(1)) }
        #expect(throws: APIAuthToken.Rejection(reason: "iat is in the future")) { try check(issued: now.addingTimeInterval(30)) }
        try check(issued: now)
        try check(issued: now.addingTimeInterval(-60), lifetime: 3600)
        #expect(throws: APIAuthToken.Rejection(reason: "token expired")) { try check(issued: now.addingTimeInterval(-300), lifetime: 300) }
    }

    @Test(".p8 keys load from PKCS#8 PEM, from a file, and with escaped newlines")
    func loading() throws {
        let pem = Self.privateKey.pemRepresentation
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try Self.key(pem: pem).publicKey.rawRepresentation == Self.privateKey.publicKey.rawRepresentation)
        let escaped = pem.replacingOccurrences(of: "\n", with: "\\n")
        #expect(try Self.key(pem: escaped).publicKey.rawRepresentation == Self.privateKey.publicKey.rawRepresentation)

        let file = TestFiles.directory.appendingPathComponent("AuthKey_TEST-\(UUID()).p8")
        try pem.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        // A key file group or others may read is refused, naming the fix; the owner's alone is read.
        for mode in [0o644, 0o640, 0o604, 0o660] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: file.path)
            let exposed = #expect(throws: SigningError.self) {
                try AppStoreAPIKey(issuerID: Self.issuerID, keyID: "K", bundleID: "b", privateKeyFile: file.path)
            }
            #expect(exposed?.code == .exposedKeyFile && exposed?.message.contains("chmod 600") == true, "\(String(describing: exposed))")
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        let fromFile = try AppStoreAPIKey(issuerID: Self.issuerID, keyID: "K", bundleID: "b", privateKeyFile: file.path)
        #expect(fromFile.publicKey.rawRepresentation == Self.privateKey.publicKey.rawRepresentation)
    }

    @Test("bad keys give clear errors that never contain key material")
    func badKeys() throws {
        let pem = Self.privateKey.pemRepresentation
        let body = pem.split(separator: "\n").dropFirst().first.map(String.init) ?? ""
        let corrupted = pem.replacingOccurrences(of: body, with: String(body.reversed()))
        for (input, code) in [(corrupted, SigningError.Code.invalidPrivateKey), (body, .invalidPrivateKey), ("", .invalidPrivateKey)] {
            let error = #expect(throws: SigningError.self) { try Self.key(pem: input) }
            #expect(error?.code == code)
            #expect(error.map { !"\($0)".contains(body.prefix(16)) } == true)
        }
        let missing = #expect(throws: SigningError.self) {
            try AppStoreAPIKey(issuerID: "i", keyID: "k", bundleID: "b", privateKeyFile: "/nonexistent/AuthKey.p8")
        }
        #expect(missing?.code == .unreadableKeyFile)
        let empty = #expect(throws: SigningError.self) {
            try AppStoreAPIKey(issuerID: "", keyID: "k", bundleID: "b", privateKeyPEM: pem)
        }
        #expect(empty?.code == .missingCredential)
    }

    @Test("the key's descriptions and mirror redact the private key")
    func redaction() throws {
        let key = try Self.key()
        let secret = Self.privateKey.rawRepresentation.base64EncodedString()
        let pemBody = Self.privateKey.pemRepresentation.split(separator: "\n")[1]
        var dumped = ""
        dump(key, to: &dumped)
        for text in [String(describing: key), String(reflecting: key), dumped] {
            #expect(text.contains("<redacted>"))
            #expect(!text.contains(secret))
            #expect(!text.contains(pemBody))
        }
    }
}
