import AppStoreModels
import Foundation
package import StorekeeperCore

extension ServerConfiguration {
    /// The outbox: how long events are kept, and how often the expiry job looks for states that change by themselves.
    package struct EventSettings: Codable, Sendable, Equatable {
        /// Days an event is kept for polling and redelivery after it happened (an event a delivery still waits for
        /// stays). Default 30.
        package var retentionDays: Double
        /// Seconds between the expiry job's looks for customers whose access ends by time (the event is emitted
        /// within this of the expiry). Default 10.
        package var expiryCheckSeconds: Double

        package init(retentionDays: Double = 30, expiryCheckSeconds: Double = 10) {
            self.retentionDays = retentionDays
            self.expiryCheckSeconds = expiryCheckSeconds
        }

        private enum CodingKeys: String, CodingKey { case retentionDays, expiryCheckSeconds }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Self()
            self.init(
                retentionDays: try container.decodeIfPresent(Double.self, forKey: .retentionDays) ?? defaults.retentionDays,
                expiryCheckSeconds: try container.decodeIfPresent(Double.self, forKey: .expiryCheckSeconds) ?? defaults.expiryCheckSeconds)
        }
    }

    /// One webhook endpoint: where events go, signed with its secret (Standard Webhooks).
    package struct WebhookEndpoint: Codable, Sendable, Equatable {
        /// Names the endpoint in the ledger (its deliveries), logs, metrics and commands: 1-64 letters, digits, `-_.`.
        package var name: String
        /// `http://` or `https://`.
        package var url: String
        /// The signing secret, `whsec_` and base64 of 24-64 bytes (`storekeeper events secret` makes one).
        package var secret: String
        /// Secrets still signed with during a rotation (the receiver accepts any of the signatures).
        package var previousSecrets: [String]
        /// The apps whose events it receives; `nil`: every app's.
        package var apps: [String]?
        /// `Sandbox`, `Production`; `nil`: both.
        package var environments: [String]?
        /// The event types it receives (`EventType`); `nil`: all.
        package var eventTypes: [String]?
        /// Seconds an attempt may take, connecting to the end of the answer. Default 10.
        package var timeoutSeconds: Double
        /// Deliveries in flight at once (different customers; one customer's go one by one). Default 8.
        package var maxConcurrency: Int
        /// Seconds to wait after each failed attempt before the next; after the last, the event is dead-lettered. Each
        /// wait gets ±20 % jitter. Default Standard Webhooks' schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
        /// (27 h 35 min of retries in all).
        package var retryScheduleSeconds: [Double]

        package static let standardSchedule: [Double] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]

        package init(
            name: String, url: String, secret: String, previousSecrets: [String] = [], apps: [String]? = nil, environments: [String]? = nil,
            eventTypes: [String]? = nil, timeoutSeconds: Double = 10, maxConcurrency: Int = 8, retryScheduleSeconds: [Double] = standardSchedule
        ) {
            self.name = name
            self.url = url
            self.secret = secret
            self.previousSecrets = previousSecrets
            self.apps = apps
            self.environments = environments
            self.eventTypes = eventTypes
            self.timeoutSeconds = timeoutSeconds
            self.maxConcurrency = maxConcurrency
            self.retryScheduleSeconds = retryScheduleSeconds
        }

        private enum CodingKeys: String, CodingKey {
            case name, url, secret, previousSecrets, apps, environments, eventTypes, timeoutSeconds, maxConcurrency, retryScheduleSeconds
        }

        /// Every setting written, an absent list as `null` (what `config check` lists, with what `null` means).
        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(name, forKey: .name)
            try container.encode(url, forKey: .url)
            try container.encode(secret, forKey: .secret)
            try container.encode(previousSecrets, forKey: .previousSecrets)
            try container.encode(apps, forKey: .apps)
            try container.encode(environments, forKey: .environments)
            try container.encode(eventTypes, forKey: .eventTypes)
            try container.encode(timeoutSeconds, forKey: .timeoutSeconds)
            try container.encode(maxConcurrency, forKey: .maxConcurrency)
            try container.encode(retryScheduleSeconds, forKey: .retryScheduleSeconds)
        }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                name: try container.decode(String.self, forKey: .name), url: try container.decode(String.self, forKey: .url),
                secret: try container.decode(String.self, forKey: .secret),
                previousSecrets: try container.decodeIfPresent([String].self, forKey: .previousSecrets) ?? [],
                apps: try container.decodeIfPresent([String].self, forKey: .apps),
                environments: try container.decodeIfPresent([String].self, forKey: .environments),
                eventTypes: try container.decodeIfPresent([String].self, forKey: .eventTypes),
                timeoutSeconds: try container.decodeIfPresent(Double.self, forKey: .timeoutSeconds) ?? 10,
                maxConcurrency: try container.decodeIfPresent(Int.self, forKey: .maxConcurrency) ?? 8,
                retryScheduleSeconds: try container.decodeIfPresent([Double].self, forKey: .retryScheduleSeconds) ?? Self.standardSchedule)
        }

        /// Which events it receives, for the ledger.
        package var route: WebhookRoute {
            WebhookRoute(
                name: name, bundleIds: apps.map(Set.init), environments: environments.map { Set($0.map(AppStoreEnvironment.init(rawValue:))) },
                types: eventTypes.map { Set($0.compactMap(EventType.init(rawValue:))) })
        }

        /// Its secrets, current first (checked by `validateEvents()`).
        package var secrets: [WebhookSecret] { ([secret] + previousSecrets).compactMap { try? WebhookSecret($0) } }
    }

    /// A URL as compared for duplicates: scheme and host lowercased, the default port written, no trailing slash.
    static func canonical(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        var text = "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)\(url.path)"
        while text.hasSuffix("/") { text.removeLast() }
        return text + (url.query.map { "?\($0)" } ?? "")
    }

    /// The authority of a URL as written (between `scheme://` and the path, query or fragment): user, host, port.
    static func authority(of url: String) -> Substring {
        guard let start = url.range(of: "://")?.upperBound else { return "" }
        let rest = url[start...]
        return rest[..<(rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex)]
    }

    /// Checks the `webhooks` and `events` settings, naming the one at fault.
    func validateEvents() throws(ConfigurationError) {
        // Whole days: a fraction (0.0001 is nine seconds) would drop events before most consumers read them.
        if !(events.retentionDays >= 1 && events.retentionDays <= 3_650 && events.retentionDays.rounded() == events.retentionDays) {
            throw ConfigurationError(
                "events.retentionDays must be a whole number of days from 1 to 3650, not \(ConfigurationError.number(events.retentionDays))",
                setting: "events.retentionDays")
        }
        if !(events.expiryCheckSeconds >= 1 && events.expiryCheckSeconds <= 3_600) {
            throw ConfigurationError(
                "events.expiryCheckSeconds must be 1 to 3600, not \(ConfigurationError.number(events.expiryCheckSeconds))",
                setting: "events.expiryCheckSeconds")
        }
        var names = Set<String>()
        var urls = Set<String>()
        for (index, endpoint) in webhooks.enumerated() {
            let at = "webhooks[\(index)]"
            if Self.holdsSecret(endpoint.name) {
                throw ConfigurationError(
                    "\(at).name looks like a secret (an API key, a webhook secret or a key's text, not repeated here): give the endpoint a "
                        + "name (logs and metrics show it; its secret goes in \(at).secret)", setting: "\(at).name")
            }
            guard (1...64).contains(endpoint.name.utf8.count),
                endpoint.name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == ".") })
            else {
                throw ConfigurationError(
                    "\(at).name \(UntrustedText.quoted(endpoint.name, limit: 80)) is not a name: 1-64 letters, digits, '-', '_' and '.'",
                    setting: "\(at).name")
            }
            guard names.insert(endpoint.name).inserted else {
                throw ConfigurationError("webhook endpoint '\(endpoint.name)' is configured twice (\(at).name)", setting: "\(at).name")
            }
            // Credentials in the URL would be sent to the receiver and logged with it: refused first, and never repeated.
            let authority = Self.authority(of: endpoint.url)
            guard !authority.contains("@") else {
                throw ConfigurationError(
                    "\(at).url carries a user or password: put no credentials in a webhook URL (the signature authenticates the sender)",
                    setting: "\(at).url")
            }
            guard let url = URL(string: endpoint.url), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
                let host = url.host, !host.isEmpty, !endpoint.url.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
            else {
                throw ConfigurationError(
                    "\(at).url \(UntrustedText.quoted(endpoint.url, limit: 200)) is not an http:// or https:// URL with a host", setting: "\(at).url")
            }
            // A port past 65535 (or an empty one) parses, and would stop the delivery service at its first request.
            if let colon = authority.split(separator: "]", omittingEmptySubsequences: false).last?.lastIndex(of: ":") {
                let port = authority.split(separator: "]", omittingEmptySubsequences: false).last![colon...].dropFirst()
                guard let number = Int(port), (1...65_535).contains(number), port.allSatisfy(\.isASCII) else {
                    throw ConfigurationError(
                        "\(at).url's port \(UntrustedText.quoted(String(port), limit: 24)) is not a port: 1 to 65535", setting: "\(at).url")
                }
            }
            guard url.fragment == nil, !endpoint.url.contains("#") else {
                throw ConfigurationError(
                    "\(at).url has a #fragment, which is never sent to the receiver: leave it out", setting: "\(at).url")
            }
            guard urls.insert(Self.canonical(url)).inserted else {
                throw ConfigurationError("\(at).url repeats another endpoint's URL: one endpoint per URL", setting: "\(at).url")
            }
            for (offset, text) in ([endpoint.secret] + endpoint.previousSecrets).enumerated() {
                let setting = offset == 0 ? "\(at).secret" : "\(at).previousSecrets[\(offset - 1)]"
                do {
                    _ = try WebhookSecret(text)
                } catch {
                    throw ConfigurationError("\(setting): \(error.description)", setting: setting)
                }
            }
            // The same secret twice would send the same signature twice; each previous secret is another one.
            let secrets = [endpoint.secret] + endpoint.previousSecrets
            if let repeated = secrets.indices.dropFirst().first(where: { secrets[..<$0].contains(secrets[$0]) }) {
                throw ConfigurationError(
                    "\(at).previousSecrets[\(repeated - 1)] repeats \(secrets.firstIndex(of: secrets[repeated]) == 0 ? "the current secret" : "another previous secret"): give each secret once",
                    setting: "\(at).previousSecrets[\(repeated - 1)]")
            }
            for (name, list) in [("apps", endpoint.apps), ("environments", endpoint.environments), ("eventTypes", endpoint.eventTypes)] {
                if list?.isEmpty == true {
                    throw ConfigurationError(
                        "\(at).\(name) is empty: the endpoint would receive nothing (leave it out for all)", setting: "\(at).\(name)")
                }
                let values = list ?? []
                if let repeated = values.indices.dropFirst().first(where: { values[..<$0].contains(values[$0]) }) {
                    throw ConfigurationError(
                        "\(at).\(name)[\(repeated)] \(UntrustedText.quoted(values[repeated], limit: 160)) is listed twice: give each once",
                        setting: "\(at).\(name)[\(repeated)]")
                }
            }
            for (offset, app) in (endpoint.apps ?? []).enumerated() where !apps.contains(where: { $0.bundleId == app }) {
                throw ConfigurationError(
                    "\(at).apps[\(offset)] \(UntrustedText.quoted(app, limit: 160)) is not a configured app (\(apps.map(\.bundleId).joined(separator: ", ")))",
                    setting: "\(at).apps[\(offset)]")
            }
            for (offset, environment) in (endpoint.environments ?? []).enumerated() where !["Sandbox", "Production"].contains(environment) {
                throw ConfigurationError(
                    "\(at).environments[\(offset)] \(UntrustedText.quoted(environment, limit: 64)) is not \"Sandbox\" or \"Production\"",
                    setting: "\(at).environments[\(offset)]")
            }
            // An environment none of its apps accepts would never send the endpoint anything.
            let reachable = Set(apps.filter { endpoint.apps?.contains($0.bundleId) ?? true }.flatMap { $0.environments.map(\.rawValue) })
            for (offset, environment) in (endpoint.environments ?? []).enumerated() where !reachable.contains(environment) {
                throw ConfigurationError(
                    "\(at).environments[\(offset)] \(environment) is accepted by none of the endpoint's apps: it would receive nothing from it",
                    setting: "\(at).environments[\(offset)]")
            }
            for (offset, type) in (endpoint.eventTypes ?? []).enumerated() {
                do throws(EventType.UnknownName) {
                    _ = try EventType.named(type, field: "\(at).eventTypes[\(offset)]")
                } catch {
                    throw ConfigurationError(error.message, setting: "\(at).eventTypes[\(offset)]")
                }
            }
            if !(endpoint.timeoutSeconds >= 1 && endpoint.timeoutSeconds <= 120) {
                throw ConfigurationError(
                    "\(at).timeoutSeconds must be 1 to 120, not \(ConfigurationError.number(endpoint.timeoutSeconds))",
                    setting: "\(at).timeoutSeconds")
            }
            if !(1...256).contains(endpoint.maxConcurrency) {
                throw ConfigurationError("\(at).maxConcurrency must be 1 to 256, not \(endpoint.maxConcurrency)", setting: "\(at).maxConcurrency")
            }
            if endpoint.retryScheduleSeconds.isEmpty || endpoint.retryScheduleSeconds.count > 50
                || !endpoint.retryScheduleSeconds.allSatisfy({ $0 >= 0.1 && $0 <= 172_800 })
            {
                throw ConfigurationError(
                    "\(at).retryScheduleSeconds must list 1 to 50 waits, each 0.1 to 172800 seconds", setting: "\(at).retryScheduleSeconds")
            }
        }
    }
}
