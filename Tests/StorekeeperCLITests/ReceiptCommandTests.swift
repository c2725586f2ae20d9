import Foundation
import StorekeeperTesting
import Testing

@Suite("storekeeper receipt")
struct ReceiptCommandTests {
    static func file(_ name: String) -> String { SharedCorpus.appleReceipts.appendingPathComponent(name).path }

    @Test("a real receipt prints verified at its creation date, exit 0; judged now, a named expiry and exit 1; a legacy receipt its ID")
    func verified() async throws {
        let output = try await CLI.runDetached(["receipt", "@\(Self.file("sandbox-2025-tpiar-g5.b64"))"])
        #expect(output.status == 0, "\(output.stderr)")
        let json = try CLI.json(output.stdout)
        #expect(json["kind"] as? String == "app-receipt" && json["transactionIdForHistory"] as? String == "2000001092134138")
        let verified = try #require(json["verified"] as? [String: Any])
        #expect(verified["signedBy"] as? String == "app-store")
        #expect((verified["receipt"] as? [String: Any])?["bundleId"] as? String == "dev.bonzer.weeka.app")
        let now = try await CLI.runDetached(["receipt", "--at", "now", "@\(Self.file("sandbox-2025-tpiar-g5.b64"))"])
        #expect(now.status == 1 && now.stderr.hasPrefix("error: certificate-expired: leaf certificate"), "\(now.stderr)")
        let base64 = try String(contentsOfFile: Self.file("sandbox-2025-tpiar-g5.b64"), encoding: .utf8)
        let then = try await CLI.runDetached(["receipt", "--at", "2026-01-01", "-"], stdin: base64)
        #expect(then.status == 0, "\(then.stderr)")
        let legacy = try await CLI.runDetached(["receipt", "@\(Self.file("legacyTransaction"))"])
        #expect(legacy.status == 0, "\(legacy.stderr)")
        #expect(try CLI.json(legacy.stdout)["transactionId"] as? String == "33993399")
    }

    @Test("an Xcode receipt needs the pinned certificate; bad input and options are named")
    func refused() async throws {
        let xcode = try await CLI.runDetached(["receipt", "@\(Self.file("xcode-app-receipt-with-transaction"))"])
        #expect(xcode.status == 1 && xcode.stderr.hasPrefix("error: untrusted-chain:"), "\(xcode.stderr)")
        for (arguments, prefix) in [
            (["receipt", "not a receipt!"], "error: not-base64:"), (["receipt", "eyJhbGciOiJFUzI1NiJ9.eyJ4IjoxfQ.c2ln"], "error: jws-given:"),
            (["receipt", "@/nonexistent/receipt"], "error: unreadable-input:"),
            (["receipt", "--at", "yesterday", "x"], "error: invalid-option:"),
            (["receipt", "--xcode-certificate", "/nonexistent.cer", "x"], "error: unreadable-input: Xcode certificate"),
            (["receipt", "@/tmp"], "error: unreadable-input: '/tmp' is a directory"),
            (["verify", "@/tmp"], "error: unreadable-input: '/tmp' is a directory"),
        ] {
            let output = try await CLI.runDetached(arguments)
            let status: Int32 = prefix.hasPrefix("error: invalid-option") ? 64 : 1
            #expect(output.status == status && output.stderr.hasPrefix(prefix), "\(arguments): \(output.status) \(output.stderr)")
        }
    }
}

@Suite("storekeeper sign")
struct SignCommandTests {
    @Test("offer-v1 prints the signature as base64 and as the bytes StoreKit 2 takes; a key file others can read is refused")
    func offerV1() async throws {
        let directory = try CLI.temporaryDirectory("sign")
        let keyFile = directory.appendingPathComponent("key.p8")
        try FileManager.default.copyItem(at: SharedCorpus.appleReceipts.appendingPathComponent("testSigningKey.p8"), to: keyFile)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyFile.path)
        let key = ["--issuer-id", "issuer", "--key-id", "KEY1", "--bundle-id", "com.example.storekeeper", "--private-key", keyFile.path]
        let output = try await CLI.runDetached(["sign", "offer-v1"] + key + ["--product-id", "pro.monthly", "--offer-id", "winback.50"])
        #expect(output.status == 0, "\(output.stderr)")
        let json = try CLI.json(output.stdout)
        let signature = try #require(json["signature"] as? String)
        #expect((json["signatureBytes"] as? [Int])?.map(UInt8.init) == Data(base64Encoded: signature).map { [UInt8]($0) })
        #expect((json["nonce"] as? String).map { $0 == $0.lowercased() && UUID(uuidString: $0) != nil } == true)
        let jws = try await CLI.runDetached(["sign", "offer"] + key + ["--product-id", "pro.monthly", "--offer-id", "winback.50"])
        #expect(jws.status == 0 && jws.stdout.split(separator: ".").count == 3, "\(jws.stderr)")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: keyFile.path)
        let exposed = try await CLI.runDetached(["sign", "offer"] + key + ["--product-id", "p", "--offer-id", "o"])
        #expect(exposed.status == 1 && exposed.stderr.hasPrefix("error: exposed-key-file"), "\(exposed.stderr)")
        #expect(!exposed.stderr.contains("PRIVATE KEY") && !output.stdout.contains("PRIVATE KEY"))
    }
}

@Suite("storekeeper verify --xcode-certificate")
struct VerifyXcodeCommandTests {
    @Test("Xcode-signed data verifies against the pinned certificate and names what was checked; without --bundle-id it is refused")
    func xcode() async throws {
        let jws = try String(contentsOf: SharedCorpus.appleReceipts.appendingPathComponent("xcode-signed-transaction"), encoding: .utf8)
        let header = try #require(jws.split(separator: ".").first)
        var base64 = header.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        let json = try JSONSerialization.jsonObject(with: try #require(Data(base64Encoded: base64))) as? [String: Any]
        let first = try #require((json?["x5c"] as? [String])?.first)
        let certificate = try #require(Data(base64Encoded: first))
        let directory = try CLI.temporaryDirectory("xcode")
        let file = directory.appendingPathComponent("StoreKitTestCertificate.cer")
        try certificate.write(to: file)
        let bundle = "com.example.naturelab.backyardbirds.example"
        let output = try await CLI.runDetached(["verify", "--xcode-certificate", file.path, "--bundle-id", bundle, "-"], stdin: jws)
        #expect(output.status == 0, "\(output.stderr)")
        let checks = try #require(try CLI.json(output.stdout)["checks"] as? [String: String])
        #expect(checks["certificateChain"]?.contains("pinned Xcode certificate") == true && checks["environment"] == "checked: Xcode")
        let plain = try await CLI.runDetached(["verify", "-"], stdin: jws)
        #expect(plain.status == 1 && plain.stderr.hasPrefix("error: wrong-certificate-count"), "\(plain.stderr)")
        let badAt = try await CLI.runDetached(
            ["verify", "--xcode-certificate", file.path, "--bundle-id", bundle, "--at", "garbage", "-"], stdin: jws)
        #expect(badAt.status == 64 && badAt.stderr.hasPrefix("error: invalid-option: --at"), "\(badAt.stderr)")
        let noBundle = try await CLI.runDetached(["verify", "--xcode-certificate", file.path, "-"], stdin: jws)
        #expect(noBundle.status == 64 && noBundle.stderr.hasPrefix("error: invalid-option"), "\(noBundle.stderr)")
    }
}
