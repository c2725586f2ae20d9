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
            (["receipt", "--xcode-certificate", "/nonexistent.cer", "x"], "error: unreadable-input:"),
        ] {
            let output = try await CLI.runDetached(arguments)
            #expect(output.status == 1 && output.stderr.hasPrefix(prefix), "\(arguments): \(output.stderr)")
        }
    }
}
