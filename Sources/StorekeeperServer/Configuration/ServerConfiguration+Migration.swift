import AppStoreModels
import Foundation
package import StorekeeperCore

// The settings of migration and offers: where verified notifications are relayed, and how an app signs offers.
extension ServerConfiguration {
    /// An app's subscription offers: the key that signs them (an In-App Purchase key from App Store Connect, the
    /// same kind as the App Store Server API's, and it may be the same key) and the policy.
    package struct OfferSettings: Codable, Sendable {
        /// The issuer ID (a UUID), for the signed-request JWS (`iss`).
        package var issuerId: String
        /// The key's ID (V1's `keyIdentifier`, the JWS's `kid`).
        package var keyId: String
        /// The `.p8` file, readable by its owner only; relative to the configuration file.
        package var privateKeyFile: String
        package var rules: [OfferPolicy.Rule]
        /// Subscription groups by identifier: their product IDs.
        package var subscriptionGroups: [String: [String]]

        package init(issuerId: String, keyId: String, privateKeyFile: String, policy: OfferPolicy) {
            self.issuerId = issuerId
            self.keyId = keyId
            self.privateKeyFile = privateKeyFile
            self.rules = policy.rules
            self.subscriptionGroups = policy.subscriptionGroups
        }

        package var policy: OfferPolicy { OfferPolicy(rules: rules, subscriptionGroups: subscriptionGroups) }

        private enum CodingKeys: String, CodingKey { case issuerId, keyId, privateKeyFile, rules, subscriptionGroups }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            issuerId = try container.decode(String.self, forKey: .issuerId)
            keyId = try container.decode(String.self, forKey: .keyId)
            privateKeyFile = try container.decode(String.self, forKey: .privateKeyFile)
            rules = try container.decodeIfPresent([OfferPolicy.Rule].self, forKey: .rules) ?? []
            subscriptionGroups = try container.decodeIfPresent([String: [String]].self, forKey: .subscriptionGroups) ?? [:]
        }
    }

    /// The notification relay (``NotificationRelay``).
    package struct RelaySettings: Codable, Sendable, Equatable {
        /// `http://` or `https://`, without a user or password.
        package var url: String
        /// How long one attempt may take. Default 10.
        package var timeoutSeconds: Double
        /// Attempts per notification (1 s, 2 s, 4 s… apart, at most 5 minutes). Default 10.
        package var maxAttempts: Int
        /// Notifications waiting at most; the oldest is dropped beyond. Default 10,000.
        package var queueCapacity: Int

        package init(url: String, timeoutSeconds: Double = 10, maxAttempts: Int = 10, queueCapacity: Int = 10_000) {
            self.url = url
            self.timeoutSeconds = timeoutSeconds
            self.maxAttempts = maxAttempts
            self.queueCapacity = queueCapacity
        }

        private enum CodingKeys: String, CodingKey { case url, timeoutSeconds, maxAttempts, queueCapacity }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            // The defaults are the memberwise initializer's, written once.
            let defaults = Self(url: "")
            self.init(
                url: try container.decode(String.self, forKey: .url),
                timeoutSeconds: try container.decodeIfPresent(Double.self, forKey: .timeoutSeconds) ?? defaults.timeoutSeconds,
                maxAttempts: try container.decodeIfPresent(Int.self, forKey: .maxAttempts) ?? defaults.maxAttempts,
                queueCapacity: try container.decodeIfPresent(Int.self, forKey: .queueCapacity) ?? defaults.queueCapacity)
        }

        func validate() throws(ConfigurationError) {
            if ServerConfiguration.authority(of: url).contains("@") {
                throw ConfigurationError("relay.url carries a user or password: remove it", setting: "relay.url")
            }
            // Printable ASCII only (an international host in its xn-- form): no invisible character hides in it.
            guard url.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 0x20 && $0.value != 0x7F }),
                let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), ["http", "https"].contains(scheme),
                let host = parsed.host, !host.isEmpty,
                host.unicodeScalars.allSatisfy({
                    $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-:[]".unicodeScalars.contains($0))
                }),
                parsed.port.map({ (1...65_535).contains($0) }) ?? true
            else {
                throw ConfigurationError("relay.url \(UntrustedText.quoted(url, limit: 256)) is not an http(s) URL", setting: "relay.url")
            }
            guard timeoutSeconds > 0, timeoutSeconds <= 300 else {
                throw ConfigurationError("relay.timeoutSeconds must be more than 0 and at most 300", setting: "relay.timeoutSeconds")
            }
            guard (1...100).contains(maxAttempts) else {
                throw ConfigurationError("relay.maxAttempts must be 1 to 100", setting: "relay.maxAttempts")
            }
            guard (1...1_000_000).contains(queueCapacity) else {
                throw ConfigurationError("relay.queueCapacity must be 1 to 1000000", setting: "relay.queueCapacity")
            }
        }
    }
}
