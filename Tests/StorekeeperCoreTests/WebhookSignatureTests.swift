import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

@Suite("Outgoing events: Standard Webhooks signatures")
struct WebhookSignatureTests {
    /// The specification's example (standardwebhooks.com, and its libraries' tests).
    static let specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    @Test("the specification's example signs to its expected signature, and verifies")
    func specificationVector() throws {
        let secret = try WebhookSecret(Self.specSecret)
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let signature = WebhookSignature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, secrets: [secret])
        #expect(signature.signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(signature.headers.map(\.name) == ["webhook-id", "webhook-timestamp", "webhook-signature"])
        let then = Date(timeIntervalSince1970: 1_614_265_330)
        #expect(
            WebhookSignature.verify(
                id: signature.id, timestamp: 1_614_265_330, body: body, signatureHeader: signature.signature, secret: secret, now: then))
        // Another body, ID, timestamp or secret, or a time outside the tolerance, does not verify.
        let other = try WebhookSecret(WebhookSecret.generate())
        #expect(
            !WebhookSignature.verify(
                id: signature.id, timestamp: 1_614_265_330, body: body + [0x20], signatureHeader: signature.signature, secret: secret, now: then))
        #expect(
            !WebhookSignature.verify(
                id: "msg_other", timestamp: 1_614_265_330, body: body, signatureHeader: signature.signature, secret: secret, now: then))
        #expect(
            !WebhookSignature.verify(
                id: signature.id, timestamp: 1_614_265_331, body: body, signatureHeader: signature.signature, secret: secret, now: then))
        #expect(
            !WebhookSignature.verify(
                id: signature.id, timestamp: 1_614_265_330, body: body, signatureHeader: signature.signature, secret: other, now: then))
        #expect(
            !WebhookSignature.verify(
                id: signature.id, timestamp: 1_614_265_330, body: body, signatureHeader: signature.signature, secret: secret, now: then + 301))
    }

    @Test("while a secret is rotated, both sign: a receiver holding either verifies")
    func rotation() throws {
        let old = try WebhookSecret(WebhookSecret.generate())
        let new = try WebhookSecret(WebhookSecret.generate())
        let body = Array(#"{"type":"test"}"#.utf8)
        let now = Date()
        let signature = WebhookSignature(id: "evt_1", timestamp: Int64(now.timeIntervalSince1970), body: body, secrets: [new, old])
        #expect(signature.signature.split(separator: " ").count == 2 && signature.signature.split(separator: " ").allSatisfy { $0.hasPrefix("v1,") })
        for secret in [old, new] {
            #expect(
                WebhookSignature.verify(
                    id: "evt_1", timestamp: signature.timestamp, body: body, signatureHeader: signature.signature, secret: secret, now: now))
        }
    }

    @Test("a secret not in the whsec_ form, not base64, or of a size outside 24-64 bytes is refused, and never echoed")
    func secrets() throws {
        let cases: [(String, String)] = [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "starts with \"whsec_\""),
            ("whsec_not*base64!", "must be base64"),
            ("whsec_" + Data(repeating: 7, count: 16).base64EncodedString(), "holds 16"),
            ("whsec_" + Data(repeating: 7, count: 65).base64EncodedString(), "holds 65"),
        ]
        for (text, reason) in cases {
            #expect {
                try WebhookSecret(text)
            } throws: { error in
                let message = "\(error)"
                return message.contains(reason) && !message.contains(text.dropFirst(6).prefix(8))
            }
        }
        // Unpadded base64, as some generators write it, is read.
        _ = try WebhookSecret("whsec_" + Data(repeating: 9, count: 25).base64EncodedString().replacingOccurrences(of: "=", with: ""))
        let generated = try WebhookSecret(WebhookSecret.generate())
        #expect(generated.description == "whsec_… (32 bytes)")
    }

    @Test(
        "signatures verify with the Standard Webhooks reference library (Python), for one secret and during a rotation",
        .enabled(if: PythonReceiver.isAvailable, PythonReceiver.missing)
    )
    func referenceLibrary() async throws {
        let secrets = [WebhookSecret.generate(), WebhookSecret.generate()]
        let body = #"{"type":"entitlements.changed","timestamp":"2026-11-26T10:00:00.000Z","data":{"customerId":"alice","note":"é\u2028"}}"#
        let id = "evt_01JDX\(UInt32.random(in: 0...UInt32.max))"
        let timestamp = Int64(Date().timeIntervalSince1970)
        let signature = WebhookSignature(id: id, timestamp: timestamp, body: Array(body.utf8), secrets: try secrets.map(WebhookSecret.init))
        let script = """
            import sys, json
            from standardwebhooks.webhooks import Webhook
            body = sys.stdin.buffer.read().decode()
            headers = {"webhook-id": sys.argv[1], "webhook-timestamp": sys.argv[2], "webhook-signature": sys.argv[3]}
            for secret in sys.argv[4:]:
                Webhook(secret).verify(body, headers)
            try:
                Webhook(sys.argv[4]).verify(body + " ", headers)
            except Exception:
                print("verified")
            """
        let result = try await ChildProcess.run(
            "/usr/bin/env", ["python3", "-c", script, id, String(timestamp), signature.signature] + secrets, input: Data(body.utf8),
            mergingError: true)
        let said = String(decoding: result.output, as: UTF8.self)
        #expect(result.termination == .exited(0) && said.trimmingCharacters(in: .whitespacesAndNewlines) == "verified", "\(said)")
    }
}
