import Foundation
import Testing

@testable import StorekeeperServer

@Suite("Storekeeper server: a configuration's mistakes in several parts")
struct ConfigurationPartsTests {
    @Test("mistakes in several parts (an app, the caches, jobs, an API key) are said at once, each located; one per part")
    func mistakesInSeveralParts() throws {
        let hash = String(repeating: "a", count: 64)
        let error = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                """
                {"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox", "Sandbx"]}],
                 "customerCache": {"capacity": -1, "maxAgeSeconds": 0},
                 "jobs": {"leaseSeconds": 1},
                 "apiKeys": [{"name": "desk", "sha256": "x", "scope": "admin"}]}
                """)
        }
        let message = error?.message ?? ""
        let parts = message.components(separatedBy: "; ")
        #expect(parts.count == 4, "\(message)")
        #expect(parts.first?.contains(":1:71: app 'com.example.app': environment 'Sandbx'") == true, "\(message)")
        #expect(parts.contains { $0.contains(":2:32: customerCache.capacity must be 0 (off) or more, not -1") }, "\(message)")
        // One per part: the cache's second mistake waits for the first to be fixed.
        #expect(!message.contains("customerCache.maxAgeSeconds"), "\(message)")
        #expect(parts.contains { $0.contains(":3:27: jobs.leaseSeconds must be 3 to 3600, not 1") }, "\(message)")
        #expect(parts.last?.contains("sha256 must be 64 hex digits") == true, "\(message)")
        #expect(error?.setting == "apps[0].environments[1]", "the first mistake's setting")
        // A configuration with one mistake says it alone, as before.
        let one = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                #"{"apps": [\#(StrictConfigurationTests.app)], "apiKeys": [{"name": "desk", "sha256": "\#(hash)", "scope": "app"}]}"#)
        }
        #expect(one?.message.contains("; ") == false && one?.message.contains("an app key needs the bundleId") == true, "\(String(describing: one))")
    }

    @Test("a value of the wrong type is named with the typos of the parts read before it, not guessed for the parts after it")
    func wrongTypeWithTypos() throws {
        let error = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                """
                {"apps": [\(StrictConfigurationTests.app)],
                 "retention": {"rawPayloadsDays": 30},
                 "jobs": {"leaseSeconds": "ten"},
                 "events": {"retentionDay": 3}}
                """)
        }
        let message = error?.message ?? ""
        #expect(message.contains(#":3:27: jobs.leaseSeconds: expected a number, found the string "ten"; and "#), "\(message)")
        #expect(message.hasSuffix(#":2:16: unknown key "rawPayloadsDays" in retention: did you mean "rawPayloadDays"?"#), "\(message)")
        // `events` is read after `jobs`: nothing asked for its keys yet, so none of them is called unknown.
        #expect(!message.contains("retentionDay"), "\(message)")
        // The object decoding stopped in is not judged either: its keys after the mistake were not asked for yet.
        let inside = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                #"{"apps": [\#(StrictConfigurationTests.app)], "jobs": {"leaseSeconds": "ten", "consumptionCheckSecond": 5}}"#)
        }
        #expect(
            inside?.message.contains("unknown key") == false && inside?.message.contains("jobs.leaseSeconds") == true, "\(String(describing: inside))"
        )
    }

    @Test("a key's or a secret's text given as an API key's or an endpoint's name is refused, never repeated (names are logged)")
    func secretsAsNames() throws {
        let key = "sk_" + String(repeating: "Wm8zQ1", count: 7) + "x"
        let hash = String(repeating: "a", count: 64)
        let asKeyName = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                #"{"apps": [\#(StrictConfigurationTests.app)], "apiKeys": [{"name": "\#(key)", "sha256": "\#(hash)", "scope": "admin"}]}"#)
        }
        #expect(asKeyName?.message.contains("apiKeys[0].name looks like a secret") == true, "\(String(describing: asKeyName))")
        #expect(asKeyName?.message.contains("Wm8z") == false, "\(String(describing: asKeyName))")
        let asEndpointName = #expect(throws: ConfigurationError.self) {
            try WebhookConfigurationTests.load(webhooks: WebhookConfigurationTests.endpoint(#", "name": "\#(WebhookConfigurationTests.secret)""#))
        }
        #expect(asEndpointName?.message.contains("webhooks[0].name looks like a secret") == true, "\(String(describing: asEndpointName))")
        #expect(asEndpointName?.message.contains("MfKQ9r8") == false, "\(String(describing: asEndpointName))")
        // A name that merely begins like one is a name.
        let named = try StrictConfigurationTests.load(
            #"{"apps": [\#(StrictConfigurationTests.app)], "apiKeys": [{"name": "sk_support_desk", "sha256": "\#(hash)", "scope": "admin"}]}"#)
        #expect(named.apiKeys.map(\.name) == ["sk_support_desk"])
    }
}
