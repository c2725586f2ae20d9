public import AppStoreModels
public import AppStoreSigning
import Crypto
import Foundation
import SwiftASN1
public import StorekeeperCore
public import AppStoreServerAPI
public import Logging
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
        /// App Store Server API credentials by environment name (`Production`, `Sandbox`).
        public var serverAPI: [String: ServerAPICredentials]?

        public init(
            bundleId: String, appAppleId: Int64?, environments: [AppStoreEnvironment], trustedRoots: [String]? = nil,
            serverAPI: [String: ServerAPICredentials]? = nil
        ) {
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.environments = environments
            self.trustedRoots = trustedRoots
            self.serverAPI = serverAPI
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

    /// The cache of customer answers (`GET /v1/customers/{id}`), dropped per customer by the writes that change
    /// them and at the customer's next expiry.
    public struct CustomerCacheSettings: Codable, Sendable {
        /// Customers remembered; 0 turns the cache off. Default 10,000.
        public var capacity: Int?
        /// The longest an answer is reused, in seconds, whatever else. Default 60.
        public var maxAgeSeconds: Double?

        public init(capacity: Int? = nil, maxAgeSeconds: Double? = nil) {
            self.capacity = capacity
            self.maxAgeSeconds = maxAgeSeconds
        }
    }

    /// What the ledger keeps of what it does not need for answers.
    public struct RetentionSettings: Codable, Sendable, Equatable {
        /// Refused notification requests kept, newest first (each at most ``RefusedNotification/maximumBytes``).
        /// Default 10,000: at most about 20 MB, whatever anyone sends.
        public var refusedNotifications: Int?
        /// Days a notification's raw signed payload is kept after it was received; the decoded facts (type, dates,
        /// outcome, every transaction and subscription) stay. Default: kept for ever.
        public var rawPayloadDays: Double?

        public init(refusedNotifications: Int? = nil, rawPayloadDays: Double? = nil) {
            self.refusedNotifications = refusedNotifications
            self.rawPayloadDays = rawPayloadDays
        }
    }

    /// The notification recovery job (every app and environment with `serverAPI` credentials).
    public struct RecoverySettings: Codable, Sendable, Equatable {
        /// `false` turns the job off. Default on.
        public var enabled: Bool?
        /// Seconds between runs. Default 300.
        public var intervalSeconds: Double?
        /// Seconds before the watermark a run starts again. Default 3600.
        public var overlapSeconds: Double?
        /// Seconds between passes over every failed delivery still in the history. Default 3600.
        public var failuresIntervalSeconds: Double?

        public init(enabled: Bool? = nil, intervalSeconds: Double? = nil, overlapSeconds: Double? = nil, failuresIntervalSeconds: Double? = nil) {
            self.enabled = enabled
            self.intervalSeconds = intervalSeconds
            self.overlapSeconds = overlapSeconds
            self.failuresIntervalSeconds = failuresIntervalSeconds
        }

        /// The job's settings, defaults applied.
        public var settings: NotificationRecovery.Settings {
            var settings = NotificationRecovery.Settings()
            if let interval = intervalSeconds { settings.interval = .milliseconds(Int64(interval * 1_000)) }
            if let overlap = overlapSeconds { settings.overlap = overlap }
            if let failures = failuresIntervalSeconds { settings.failuresInterval = failures }
            return settings
        }
    }

    /// The scheduled jobs' leases (recovery, retention; `recover` and `reconcile --all` take them too).
    public struct JobSettings: Codable, Sendable, Equatable {
        /// How long a job's lease lasts without renewal (renewed every third of it): the longest an instance that died
        /// keeps its jobs from the others, who check as often. Default 60.
        public var leaseSeconds: Double?

        public init(leaseSeconds: Double? = nil) {
            self.leaseSeconds = leaseSeconds
        }
    }

    public var apps: [App]
    /// Product → entitlement names, levels, non-renewing durations, billing-retry policy.
    public var entitlements: EntitlementConfiguration
    public var apiKeys: [APIKey]
    /// Optional; the defaults when absent.
    public var customerCache: CustomerCacheSettings?
    /// Timeouts and the connection cap; the defaults when absent.
    public var http: HTTPLimits
    /// Optional; the defaults when absent.
    public var retention: RetentionSettings?
    /// Optional; the defaults when absent.
    public var recovery: RecoverySettings?
    /// Optional; the defaults when absent.
    public var jobs: JobSettings?

    public init(
        apps: [App], entitlements: EntitlementConfiguration, apiKeys: [APIKey], customerCache: CustomerCacheSettings? = nil,
        http: HTTPLimits = HTTPLimits(), retention: RetentionSettings? = nil, recovery: RecoverySettings? = nil, jobs: JobSettings? = nil
    ) {
        self.apps = apps
        self.entitlements = entitlements
        self.apiKeys = apiKeys
        self.customerCache = customerCache
        self.http = http
        self.retention = retention
        self.recovery = recovery
        self.jobs = jobs
    }

    private enum CodingKeys: String, CodingKey { case apps, entitlements, apiKeys, customerCache, http, retention, recovery, jobs }

    /// `apps` is required; `entitlements` (each product grants an entitlement named after it), `apiKeys` (none: the
    /// app API refuses every request), `customerCache`, `http`, `retention`, `recovery` and `jobs` take their defaults
    /// when left out.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            apps: try container.decode([App].self, forKey: .apps),
            entitlements: try container.decodeIfPresent(EntitlementConfiguration.self, forKey: .entitlements) ?? EntitlementConfiguration(),
            apiKeys: try container.decodeIfPresent([APIKey].self, forKey: .apiKeys) ?? [],
            customerCache: try container.decodeIfPresent(CustomerCacheSettings.self, forKey: .customerCache),
            http: try container.decodeIfPresent(HTTPLimits.self, forKey: .http) ?? HTTPLimits(),
            retention: try container.decodeIfPresent(RetentionSettings.self, forKey: .retention),
            recovery: try container.decodeIfPresent(RecoverySettings.self, forKey: .recovery),
            jobs: try container.decodeIfPresent(JobSettings.self, forKey: .jobs)
        )
    }

    /// How long a scheduled job's lease lasts without renewal (``JobSettings/leaseSeconds``, default 60 s).
    public var jobLeaseDuration: Duration { .milliseconds(Int64((jobs?.leaseSeconds ?? 60) * 1_000)) }

    /// Refused notification requests kept (default 10,000).
    public var refusedNotificationsKept: Int { retention?.refusedNotifications ?? 10_000 }

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
        var seen = Set<String>()
        for app in apps {
            guard !app.bundleId.isEmpty else { throw ConfigurationError("an app has an empty bundleId") }
            guard seen.insert(app.bundleId).inserted else { throw ConfigurationError("app '\(app.bundleId)' is configured twice") }
            guard !app.environments.isEmpty else { throw ConfigurationError("app '\(app.bundleId)' accepts no environment") }
            for environment in app.environments where ![.sandbox, .production].contains(environment) {
                throw ConfigurationError("app '\(app.bundleId)': environment '\(environment.rawValue)' is not Sandbox or Production")
            }
            if app.trustedRoots?.isEmpty == true {
                throw ConfigurationError(
                    "app '\(app.bundleId)' trusts no root certificate: give \"apple\" (Apple Root CA - G3) or a certificate file"
                )
            }
            if app.environments.contains(.production) && app.appAppleId == nil {
                throw ConfigurationError("app '\(app.bundleId)' accepts Production but has no appAppleId")
            }
        }
        if let cache = customerCache {
            if let capacity = cache.capacity, capacity < 0 {
                throw ConfigurationError("customerCache.capacity must be 0 (off) or more, not \(capacity)")
            }
            if let age = cache.maxAgeSeconds, !(age > 0 && age <= 86_400) {
                throw ConfigurationError("customerCache.maxAgeSeconds must be more than 0 and at most 86400, not \(age)")
            }
        }
        try http.validate()
        if let kept = retention?.refusedNotifications, !(0...10_000_000).contains(kept) {
            throw ConfigurationError("retention.refusedNotifications must be 0 to 10000000, not \(kept)")
        }
        if let days = retention?.rawPayloadDays, !(days > 0 && days <= 36_500) {
            throw ConfigurationError("retention.rawPayloadDays must be more than 0 and at most 36500, not \(days)")
        }
        if let recovery {
            for (name, value) in [
                ("intervalSeconds", recovery.intervalSeconds), ("overlapSeconds", recovery.overlapSeconds),
                ("failuresIntervalSeconds", recovery.failuresIntervalSeconds),
            ] {
                if let value, !(value > 0 && value <= 86_400) {
                    throw ConfigurationError("recovery.\(name) must be more than 0 and at most 86400, not \(value)")
                }
            }
        }
        if let lease = jobs?.leaseSeconds, !(lease >= 3 && lease <= 3_600) {
            throw ConfigurationError("jobs.leaseSeconds must be 3 to 3600, not \(lease)")
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

    /// The customer cache's capacity and longest age, defaults applied (10,000 customers, 60 s).
    public var customerCacheLimits: (capacity: Int, maxAgeSeconds: Double) {
        (customerCache?.capacity ?? 10_000, customerCache?.maxAgeSeconds ?? 60)
    }

    /// The customer cache these settings describe.
    public func makeCustomerCache<Value: Sendable>(of _: Value.Type = Value.self) -> CustomerCache<Value> {
        CustomerCache(capacity: customerCacheLimits.capacity, maxAge: customerCacheLimits.maxAgeSeconds)
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
                do {
                    if let text = String(data: data, encoding: .utf8), text.contains("BEGIN CERTIFICATE") {
                        return try Certificate(pemEncoded: text)
                    }
                    return try Certificate(derEncoded: Array(data))
                } catch {
                    throw ConfigurationError("app '\(app.bundleId)': trusted root '\(root)' is not a PEM or DER certificate: \(error)")
                }
            }
            for environment in app.environments {
                let configuration: SignedDataVerifier.Configuration
                do {
                    configuration = try SignedDataVerifier.Configuration(
                        bundleID: app.bundleId, appAppleID: app.appAppleId, environment: environment, trustedRoots: roots
                    )
                } catch {
                    throw ConfigurationError("app '\(app.bundleId)' (\(environment.rawValue)): \(error)")
                }
                verifiers[VerifierKey(bundleId: app.bundleId, environment: environment)] = SignedDataVerifier(configuration: configuration)
            }
        }
        return verifiers
    }

    /// The lowercase hex SHA-256 of an API key, as stored in the configuration.
    public static func hash(apiKey: some StringProtocol) -> String {
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

/// A configuration problem, named.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "configuration: \(message)" }
}

/// App Store Server API credentials of one app in one environment (a key from App Store Connect → Users and Access →
/// Integrations → In-App Purchase). Only the path of the private key is kept in the configuration.
public struct ServerAPICredentials: Codable, Sendable {
    /// The issuer ID (a UUID) from App Store Connect.
    public var issuerId: String
    /// The key's ID, e.g. `2X9R4HXF34`.
    public var keyId: String
    /// Path of the `.p8` file (PKCS #8 PEM, P-256).
    public var privateKeyFile: String
    /// Another base URL (the simulator's, e.g. `http://127.0.0.1:8090`); Apple's for the environment when absent.
    public var baseURL: String?

    public init(issuerId: String, keyId: String, privateKeyFile: String, baseURL: String? = nil) {
        self.issuerId = issuerId
        self.keyId = keyId
        self.privateKeyFile = privateKeyFile
        self.baseURL = baseURL
    }
}

extension ServerConfiguration {
    /// A client of the App Store Server API for each app and environment that has credentials (Apple's base URL for
    /// the environment, or the configured one), pacing its calls at 95 % of Apple's rate limits: the server's jobs
    /// (recovery, reconciliation) are its only callers, and Apple enforces the limits over an hour.
    public func makeServerAPIClients(logger: Logger) throws -> [VerifierKey: AppStoreServerAPIClient] {
        var clients: [VerifierKey: AppStoreServerAPIClient] = [:]
        for (which, credentials) in try makeServerAPIKeys() {
            let endpoint: AppStoreServerAPIClient.Endpoint = credentials.baseURL.map { .custom(baseURL: $0, environment: which.environment) }
                ?? (which.environment == .production ? .production : .sandbox)
            var configuration = AppStoreServerAPIClient.Configuration(key: credentials.key, endpoint: endpoint)
            configuration.rateLimiting = .appleShare(0.95)
            clients[which] = AppStoreServerAPIClient(configuration: configuration, logger: logger)
        }
        return clients
    }

    /// The App Store Server API key of each app and environment that has credentials, loaded and checked; errors
    /// name the app, the environment and the file, never the key.
    public func makeServerAPIKeys() throws -> [VerifierKey: (key: AppStoreAPIKey, baseURL: String?)] {
        var keys: [VerifierKey: (key: AppStoreAPIKey, baseURL: String?)] = [:]
        for app in apps {
            // In name order, so that the first error reported is the same on every run.
            for (name, credentials) in (app.serverAPI ?? [:]).sorted(by: { $0.key < $1.key }) {
                let environment = AppStoreEnvironment(rawValue: name)
                guard app.environments.contains(environment) else {
                    throw ConfigurationError("app '\(app.bundleId)': serverAPI credentials for '\(name)', an environment the app does not accept")
                }
                guard UUID(uuidString: credentials.issuerId) != nil else {
                    throw ConfigurationError("app '\(app.bundleId)' (\(name)): serverAPI issuerId must be a UUID")
                }
                guard !credentials.keyId.isEmpty else {
                    throw ConfigurationError("app '\(app.bundleId)' (\(name)): serverAPI keyId is empty")
                }
                if let base = credentials.baseURL, URL(string: base)?.scheme?.hasPrefix("http") != true {
                    throw ConfigurationError("app '\(app.bundleId)' (\(name)): serverAPI baseURL '\(base)' is not an http(s) URL")
                }
                let key: AppStoreAPIKey
                do {
                    key = try AppStoreAPIKey(
                        issuerID: credentials.issuerId, keyID: credentials.keyId, bundleID: app.bundleId,
                        privateKeyFile: credentials.privateKeyFile
                    )
                } catch {
                    throw ConfigurationError("app '\(app.bundleId)' (\(name)): serverAPI privateKeyFile '\(credentials.privateKeyFile)': \(error)")
                }
                keys[VerifierKey(bundleId: app.bundleId, environment: environment)] = (key, credentials.baseURL)
            }
        }
        return keys
    }
}
