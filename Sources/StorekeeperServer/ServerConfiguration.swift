public import AppStoreModels
public import AppStoreSigning
import Crypto
import Foundation
import SwiftASN1
public import StorekeeperCore
import X509

/// Storekeeper's configuration, read from a JSON file (see `config.example.json` and the README).
public struct ServerConfiguration: Codable, Sendable {
    /// An app whose purchases Storekeeper keeps.
    public struct App: Codable, Sendable {
        public var bundleId: String
        /// Required to accept production data.
        public var appAppleId: Int64?
        /// `Production`, `Sandbox` or both.
        public var environments: [AppStoreEnvironment]
        /// PEM or DER root certificate files trusted for this app's signed data; `["apple"]` (the default) means
        /// the bundled Apple Root CA - G3. A simulator's `ca/root.pem` for testing.
        public var trustedRoots: [String]?

        public init(bundleId: String, appAppleId: Int64?, environments: [AppStoreEnvironment], trustedRoots: [String]? = nil) {
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.environments = environments
            self.trustedRoots = trustedRoots
        }
    }

    /// An API key: only its SHA-256 is stored.
    public struct APIKey: Codable, Sendable {
        public enum Scope: String, Codable, Sendable { case app, admin }
        public var name: String
        /// Lowercase hex SHA-256 of the key.
        public var sha256: String
        public var scope: Scope
        /// For `app` keys: the app whose customers the key may read and change.
        public var bundleId: String?

        public init(name: String, sha256: String, scope: Scope, bundleId: String?) {
            self.name = name
            self.sha256 = sha256
            self.scope = scope
            self.bundleId = bundleId
        }
    }

    public var apps: [App]
    /// Product → entitlement names, levels, non-renewing durations, billing-retry policy.
    public var entitlements: EntitlementConfiguration
    public var apiKeys: [APIKey]

    public init(apps: [App], entitlements: EntitlementConfiguration, apiKeys: [APIKey]) {
        self.apps = apps
        self.entitlements = entitlements
        self.apiKeys = apiKeys
    }

    /// Reads and checks a configuration file; errors name the file and the faulty entry.
    public static func load(path: String) throws -> ServerConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("cannot read the configuration file '\(path)'")
        }
        let configuration: ServerConfiguration
        do {
            configuration = try JSONDecoder().decode(ServerConfiguration.self, from: data)
        } catch {
            throw ConfigurationError("'\(path)' is not a valid configuration: \(error)")
        }
        try configuration.validate()
        return configuration
    }

    public func validate() throws {
        guard !apps.isEmpty else { throw ConfigurationError("no apps configured") }
        for app in apps {
            guard !app.environments.isEmpty else { throw ConfigurationError("app '\(app.bundleId)' accepts no environment") }
            if app.environments.contains(.production) && app.appAppleId == nil {
                throw ConfigurationError("app '\(app.bundleId)' accepts Production but has no appAppleId")
            }
        }
        for key in apiKeys {
            guard key.sha256.count == 64, key.sha256.allSatisfy(\.isHexDigit) else {
                throw ConfigurationError("API key '\(key.name)': sha256 must be 64 hex digits")
            }
            if key.scope == .app {
                guard let bundle = key.bundleId, apps.contains(where: { $0.bundleId == bundle }) else {
                    throw ConfigurationError("API key '\(key.name)': an app key needs the bundleId of a configured app")
                }
            }
        }
    }

    /// A verifier for each app and environment it accepts.
    public func makeVerifiers() throws -> [VerifierKey: SignedDataVerifier] {
        var verifiers: [VerifierKey: SignedDataVerifier] = [:]
        for app in apps {
            let roots = try (app.trustedRoots ?? ["apple"]).map { (root) throws -> Certificate in
                if root == "apple" { return .appleRootCAG3 }
                guard let data = FileManager.default.contents(atPath: root) else {
                    throw ConfigurationError("app '\(app.bundleId)': cannot read trusted root '\(root)'")
                }
                if let text = String(data: data, encoding: .utf8), text.contains("BEGIN CERTIFICATE") {
                    return try Certificate(pemEncoded: text)
                }
                return try Certificate(derEncoded: Array(data))
            }
            for environment in app.environments {
                let configuration = try SignedDataVerifier.Configuration(
                    bundleID: app.bundleId, appAppleID: app.appAppleId, environment: environment, trustedRoots: roots
                )
                verifiers[VerifierKey(bundleId: app.bundleId, environment: environment)] = SignedDataVerifier(configuration: configuration)
            }
        }
        return verifiers
    }

    /// The lowercase hex SHA-256 of an API key, as stored in the configuration.
    public static func hash(apiKey: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(64)
        for byte in SHA256.hash(data: Data(apiKey.utf8)) {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: hex, as: UTF8.self)
    }
}

/// Which verifier: an app in an environment.
public struct VerifierKey: Hashable, Sendable {
    public var bundleId: String
    public var environment: AppStoreEnvironment
}

/// A configuration problem, named.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "configuration: \(message)" }
}
