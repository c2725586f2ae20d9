import Foundation
import StorekeeperCore
import StorekeeperServer
import Testing

@Suite("Storekeeper server: webhook endpoints and events settings read strictly")
struct WebhookConfigurationTests {
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    static func load(webhooks: String, extra: String = "") throws(ConfigurationError) -> ServerConfiguration {
        try StrictConfigurationTests.load(#"{"apps": [\#(StrictConfigurationTests.app)], "webhooks": [\#(webhooks)]\#(extra)}"#)
    }

    /// An endpoint; `fields` replace or add to its name, url and secret.
    static func endpoint(_ fields: String) -> String {
        var base = [#""name": "backend""#, #""url": "https://hooks.example.com/storekeeper""#, #""secret": "\#(secret)""#]
        for (index, key) in ["\"name\"", "\"url\"", "\"secret\""].enumerated() where fields.contains(key) { base[index] = "" }
        return "{" + (base.filter { !$0.isEmpty } + [String(fields.dropFirst(2))]).filter { !$0.isEmpty }.joined(separator: ", ") + "}"
    }

    @Test("an endpoint takes its defaults: every app, environment and type; 10 s timeout; 8 at once; Standard Webhooks' retry schedule (over 24 h)")
    func defaults() throws {
        let configuration = try Self.load(webhooks: Self.endpoint(""))
        let endpoint = try #require(configuration.webhooks.first)
        #expect(endpoint.timeoutSeconds == 10 && endpoint.maxConcurrency == 8 && endpoint.apps == nil && endpoint.eventTypes == nil)
        #expect(endpoint.retryScheduleSeconds.reduce(0, +) >= 24 * 3_600)
        #expect(endpoint.route == WebhookRoute(name: "backend"))
        #expect(configuration.events == .init(retentionDays: 30, expiryCheckSeconds: 10))
    }

    @Test(
        "every mistake is refused at load, with the setting named",
        arguments: [
            (endpoint(#", "url": "ftp://hooks.example.com/""#), "webhooks[0].url", "not an http:// or https:// URL"),
            // A secret pasted into the URL (url and secret swapped): named, never repeated (checked below for every case).
            (endpoint(#", "url": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw""#), "webhooks[0].url", "whsec_… (38 characters, not shown)"),
            (endpoint(#", "url": "https://hooks.example.com/storekeeper#part""#), "webhooks[0].url", "has a #fragment"),
            (
                endpoint(#", "previousSecrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]"#), "webhooks[0].previousSecrets[0]",
                "repeats the current secret"
            ),
            (
                endpoint(#", "eventTypes": ["subscription.renewed", "subscription.renewed"]"#), "webhooks[0].eventTypes[1]",
                "is listed twice"
            ),
            (endpoint(#", "url": "hooks.example.com/x""#), "webhooks[0].url", "not an http:// or https:// URL"),
            (endpoint(#", "url": "https://user:hunter2pw@hooks.example.com/""#), "webhooks[0].url", "carries a user or password"),
            (endpoint(#", "url": "ftp://user:hunter2pw@hooks.example.com/""#), "webhooks[0].url", "carries a user or password"),
            (endpoint(#", "url": "http://127.0.0.1:99999/x""#), "webhooks[0].url", "port '99999' is not a port"),
            (endpoint(#", "url": "http://127.0.0.1:99999999999999999999/x""#), "webhooks[0].url", "is not a port"),
            (endpoint(#", "url": "http://127.0.0.1:/x""#), "webhooks[0].url", "is not a port"),
            (endpoint(#", "url": "http://127.0.0.1:0/x""#), "webhooks[0].url", "is not a port"),
            (endpoint(#", "eventTypes": []"#), "webhooks[0].eventTypes", "would receive nothing"),
            (endpoint(#", "secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw""#), "webhooks[0].secret", "whsec_"),
            (endpoint(#", "secret": "whsec_c2hvcnQ=""#), "webhooks[0].secret", "bytes"),
            (endpoint(#", "previousSecrets": ["whsec_!!!"]"#), "webhooks[0].previousSecrets[0]", "whsec_"),
            (endpoint(#", "eventTypes": ["subscription.renewd"]"#), "webhooks[0].eventTypes[0]", "did you mean \"subscription.renewed\""),
            (endpoint(#", "apps": ["com.example.nope"]"#), "webhooks[0].apps[0]", "not a configured app"),
            (endpoint(#", "environments": ["sandbox"]"#), "webhooks[0].environments[0]", "\"Sandbox\" or \"Production\""),
            (endpoint(#", "environments": ["Production"]"#), "webhooks[0].environments[0]", "accepted by none of the endpoint's apps"),
            (endpoint(#", "timeoutSeconds": 0"#), "webhooks[0].timeoutSeconds", "1 to 120"),
            (endpoint(#", "maxConcurrency": 0"#), "webhooks[0].maxConcurrency", "1 to 256"),
            (endpoint(#", "retryScheduleSeconds": []"#), "webhooks[0].retryScheduleSeconds", "1 to 50 waits"),
            (endpoint(#", "name": "a b""#), "webhooks[0].name", "not a name"),
            (endpoint("") + ", " + endpoint(""), "webhooks[1].name", "configured twice"),
            (endpoint("") + ", " + endpoint(#", "name": "other""#), "webhooks[1].url", "repeats another endpoint's URL"),
            (
                endpoint("") + ", " + endpoint(#", "name": "other", "url": "HTTPS://Hooks.example.com/storekeeper/""#), "webhooks[1].url",
                "repeats another endpoint's URL"
            ),
            (
                endpoint("") + ", " + endpoint(#", "name": "other", "url": "https://hooks.example.com:443/storekeeper""#), "webhooks[1].url",
                "repeats another endpoint's URL"
            ),
        ])
    func mistakes(webhooks: String, setting: String, message: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(webhooks: webhooks) }
        #expect(error?.setting == setting, "\(error?.message ?? "")")
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == false, "a secret is never repeated in an error")
        #expect(error?.message.contains("hunter2pw") == false, "a password in a URL is never repeated in an error")
    }

    @Test("a mistyped key of an endpoint or of events is refused with the key meant; events settings are checked")
    func mistypedKeys() throws {
        let typo = #expect(throws: ConfigurationError.self) { try Self.load(webhooks: Self.endpoint(#", "eventType": ["subscription.renewed"]"#)) }
        #expect(typo?.message.contains("eventTypes") == true, "\(typo?.message ?? "")")
        // A rotated secret written as a string instead of a list: the type is named, the secret never repeated.
        let rotated = #expect(throws: ConfigurationError.self) {
            try Self.load(webhooks: Self.endpoint(#", "previousSecrets": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw""#))
        }
        #expect(rotated?.message.contains("previousSecrets: expected a list, found a string of 38 characters") == true, "\(rotated?.message ?? "")")
        #expect(rotated?.message.contains("MfKQ9r8") == false)
        let events = #expect(throws: ConfigurationError.self) { try Self.load(webhooks: "", extra: #", "events": {"retentionDay": 3}"#) }
        #expect(events?.message.contains("retentionDays") == true, "\(events?.message ?? "")")
        for days in ["0", "1.5", "0.0001", "3651"] {
            let range = #expect(throws: ConfigurationError.self) { try Self.load(webhooks: "", extra: #", "events": {"retentionDays": \#(days)}"#) }
            #expect(range?.setting == "events.retentionDays" && range?.message.contains("whole number of days") == true, "\(days)")
        }
    }

    @Test("restorePolicy is keep by default, transfer when asked; anything else is refused, named")
    func restorePolicy() throws {
        #expect(try Self.load(webhooks: "").restorePolicy == .keep)
        #expect(try Self.load(webhooks: "", extra: #", "restorePolicy": "transfer""#).restorePolicy == .transfer)
        let error = #expect(throws: ConfigurationError.self) { try Self.load(webhooks: "", extra: #", "restorePolicy": "transfers""#) }
        #expect(error?.message.contains("restorePolicy") == true, "\(error?.message ?? "")")
    }
}
