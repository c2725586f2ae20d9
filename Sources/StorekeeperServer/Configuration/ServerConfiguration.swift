package import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
package import StorekeeperCore

/// Storekeeper's configuration, read from a JSON file (see `config.example.json` and the Configuration article).
///
/// Read strictly (``load(path:)``): a key no setting has is refused with the nearest one ("did you mean
/// `productEntitlements`?"), a value of the wrong type names its path, line and column, and relative file paths are
/// resolved against the configuration file's directory. Every setting but `apps` has a default; `storekeeper config
/// check` prints them all and where each came from (`report(file:)`).
package struct ServerConfiguration: Codable, Sendable {
    /// An app whose purchases Storekeeper keeps.
    package struct App: Codable, Sendable {
        package var bundleId: String
        /// Required to accept production data.
        package var appAppleId: Int64?
        /// `Production`, `Sandbox` or both.
        package var environments: [AppStoreEnvironment]
        /// PEM or DER root certificate files trusted for this app's signed data; `"apple"` is the bundled Apple Root
        /// CA - G3. A simulator's `ca/root.pem` for testing. Default `["apple"]`.
        package var trustedRoots: [String]
        /// App Store Server API credentials by environment name (`Production`, `Sandbox`). Default none.
        package var serverAPI: [String: ServerAPICredentials]
        /// How `CONSUMPTION_REQUEST`s are answered. Default `{"policy": "manual"}`: by a person, through the support API.
        package var consumption: ConsumptionPolicy
        /// For the `Xcode` environment (StoreKit testing in Xcode): the certificate Xcode exports for the StoreKit
        /// configuration ("Editor → Save Public Certificate"), DER or PEM. Xcode-signed data verifies against it alone.
        package var xcodeCertificate: String?
        /// Subscription offers signed by the server (`POST /v1/customers/{id}/offers/{offerId}/signature`,
        /// introductory-offer eligibility): the In-App Purchase key that signs them, and the offer policy. Default
        /// none: those routes answer 404 for the app.
        package var offers: OfferSettings?

        /// The environment a request means when it names none: Production when the app accepts it, else Sandbox,
        /// else Xcode.
        package var defaultEnvironment: AppStoreEnvironment {
            [.production, .sandbox, .xcode].first { environments.contains($0) } ?? .production
        }

        package init(
            bundleId: String, appAppleId: Int64?, environments: [AppStoreEnvironment], trustedRoots: [String] = ["apple"],
            serverAPI: [String: ServerAPICredentials] = [:], consumption: ConsumptionPolicy = ConsumptionPolicy(), xcodeCertificate: String? = nil
        ) {
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.environments = environments
            self.trustedRoots = trustedRoots
            self.serverAPI = serverAPI
            self.consumption = consumption
            self.xcodeCertificate = xcodeCertificate
        }

        private enum CodingKeys: String, CodingKey {
            case bundleId, appAppleId, environments, trustedRoots, serverAPI, consumption, xcodeCertificate, offers
        }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                bundleId: try container.decode(String.self, forKey: .bundleId),
                appAppleId: try container.decodeIfPresent(Int64.self, forKey: .appAppleId),
                environments: try container.decode([AppStoreEnvironment].self, forKey: .environments),
                trustedRoots: try container.decodeIfPresent([String].self, forKey: .trustedRoots) ?? ["apple"],
                serverAPI: try container.decodeIfPresent([String: ServerAPICredentials].self, forKey: .serverAPI) ?? [:],
                consumption: try container.decodeIfPresent(ConsumptionPolicy.self, forKey: .consumption) ?? ConsumptionPolicy(),
                xcodeCertificate: try container.decodeIfPresent(String.self, forKey: .xcodeCertificate)
            )
            offers = try container.decodeIfPresent(OfferSettings.self, forKey: .offers)
        }

        /// Every setting, `appAppleId` as `null` when there is none (`ServerConfiguration.report(file:)` lists it).
        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(bundleId, forKey: .bundleId)
            try container.encode(appAppleId, forKey: .appAppleId)
            try container.encode(environments, forKey: .environments)
            try container.encode(trustedRoots, forKey: .trustedRoots)
            try container.encode(serverAPI, forKey: .serverAPI)
            try container.encode(consumption, forKey: .consumption)
            try container.encode(xcodeCertificate, forKey: .xcodeCertificate)
            try container.encode(offers, forKey: .offers)
        }
    }

    /// An API key: only its SHA-256 is stored.
    package struct APIKey: Codable, Sendable {
        package enum Scope: String, Codable, Sendable, CaseIterable {
            case app, admin, support

            package init(from decoder: any Decoder) throws {
                let text = try decoder.singleValueContainer().decode(String.self)
                guard let scope = Scope(rawValue: text) else {
                    throw DecodingError.dataCorrupted(
                        .init(
                            codingPath: decoder.codingPath,
                            debugDescription:
                                "\(UntrustedText.quoted(text, limit: 64)) is not a scope: give \"app\" (one app's customers), \"support\" (the support API, one app's or every app's) or \"admin\" (any)"
                        ))
                }
                self = scope
            }
        }

        package var name: String
        /// Lowercase hex SHA-256 of the key.
        package var sha256: String
        package var scope: Scope
        /// For `app` keys: the app whose customers the key may read and change; for `support` keys, the one app they
        /// may support (none: every app).
        package var bundleId: String?

        package init(name: String, sha256: String, scope: Scope, bundleId: String?) {
            self.name = name
            self.sha256 = sha256
            self.scope = scope
            self.bundleId = bundleId
        }

        private enum CodingKeys: String, CodingKey { case name, sha256, scope, bundleId }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(name, forKey: .name)
            try container.encode(sha256, forKey: .sha256)
            try container.encode(scope, forKey: .scope)
            try container.encode(bundleId, forKey: .bundleId)
        }
    }

    package var apps: [App]
    /// Product → entitlement names, levels, non-renewing durations, billing-retry policy.
    package var entitlements: EntitlementConfiguration
    package var apiKeys: [APIKey]
    package var customerCache: CustomerCacheSettings
    /// Timeouts and the connection cap.
    package var http: HTTPLimits
    package var retention: RetentionSettings
    package var recovery: RecoverySettings
    package var jobs: JobSettings
    /// The outbox's retention and expiry job.
    package var events: EventSettings
    /// Where events are delivered.
    package var webhooks: [WebhookEndpoint]
    /// What a customer's submission of another customer's purchase does: `keep` (refused, 409; the default) or
    /// `transfer` (the purchase moves to them).
    package var restorePolicy: RestorePolicy
    /// Where every verified notification is forwarded, unchanged (the old backend during a migration); none by
    /// default.
    package var relay: RelaySettings?

    package init(
        apps: [App], entitlements: EntitlementConfiguration, apiKeys: [APIKey], customerCache: CustomerCacheSettings = .init(),
        http: HTTPLimits = HTTPLimits(), retention: RetentionSettings = .init(), recovery: RecoverySettings = .init(), jobs: JobSettings = .init(),
        events: EventSettings = .init(), webhooks: [WebhookEndpoint] = [], restorePolicy: RestorePolicy = .keep
    ) {
        self.apps = apps
        self.entitlements = entitlements
        self.apiKeys = apiKeys
        self.customerCache = customerCache
        self.http = http
        self.retention = retention
        self.recovery = recovery
        self.jobs = jobs
        self.events = events
        self.webhooks = webhooks
        self.restorePolicy = restorePolicy
    }

    private enum CodingKeys: String, CodingKey {
        case apps, entitlements, apiKeys, customerCache, http, retention, recovery, jobs, events, webhooks, restorePolicy, relay
    }

    /// `apps` is required; `entitlements` (each product grants an entitlement named after it), `apiKeys` (none: the
    /// app API refuses every request), `customerCache`, `http`, `retention`, `recovery` and `jobs` take their defaults
    /// when left out.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            apps: try container.decode([App].self, forKey: .apps),
            entitlements: try container.decodeIfPresent(EntitlementConfiguration.self, forKey: .entitlements) ?? EntitlementConfiguration(),
            apiKeys: try container.decodeIfPresent([APIKey].self, forKey: .apiKeys) ?? [],
            customerCache: try container.decodeIfPresent(CustomerCacheSettings.self, forKey: .customerCache) ?? .init(),
            http: try container.decodeIfPresent(HTTPLimits.self, forKey: .http) ?? HTTPLimits(),
            retention: try container.decodeIfPresent(RetentionSettings.self, forKey: .retention) ?? .init(),
            recovery: try container.decodeIfPresent(RecoverySettings.self, forKey: .recovery) ?? .init(),
            jobs: try container.decodeIfPresent(JobSettings.self, forKey: .jobs) ?? .init(),
            events: try container.decodeIfPresent(EventSettings.self, forKey: .events) ?? .init(),
            webhooks: try container.decodeIfPresent([WebhookEndpoint].self, forKey: .webhooks) ?? [],
            restorePolicy: try container.decodeIfPresent(RestorePolicy.self, forKey: .restorePolicy) ?? .keep
        )
        relay = try container.decodeIfPresent(RelaySettings.self, forKey: .relay)
    }

    /// The file this configuration was read from (``load(path:)``): errors found later name their line in it.
    package var file: String?

    /// How long a scheduled job's lease lasts without renewal (``JobSettings/leaseSeconds``, default 60 s).
    package var jobLeaseDuration: Duration { .milliseconds(Int64(jobs.leaseSeconds * 1_000)) }

    /// Refused notification requests kept (default 10,000).
    package var refusedNotificationsKept: Int { retention.refusedNotifications }

    /// Reads and checks a configuration file: strict JSON, no unknown key, every value of its type and range;
    /// relative file paths (trusted roots, private keys) resolved against the file's directory. Errors name the file,
    /// the line and column, and the setting.
    package static func load(path: String) throws(ConfigurationError) -> ServerConfiguration {
        let (configuration, _) = try read(path: path)
        return configuration
    }

    /// ``load(path:)``, with the file's parsed JSON (for ``report(file:)``).
    static func read(path: String) throws(ConfigurationError) -> (ServerConfiguration, StrictJSON) {
        let shown = UntrustedText.quoted(path, limit: 256)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ConfigurationError("the configuration file \(shown) does not exist")
        }
        guard !isDirectory.boolValue else { throw ConfigurationError("the configuration file \(shown) is a directory, not a file") }
        guard LocalFile.isRegular(path) else {
            throw ConfigurationError("the configuration file \(shown) is not a regular file (a device or a pipe?)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(
                "the configuration file \(shown) cannot be read by this process\(LocalFile.owner(of: path).map { " (it is \($0))" } ?? "")")
        }
        let document: StrictJSON
        do {
            document = try StrictJSON(bytes: Array(data))
        } catch {
            throw ConfigurationError("\(path):\(error.position.line):\(error.position.column): not valid JSON: \(error.message)")
        }
        var configuration = try StrictJSONDecoder.decode(ServerConfiguration.self, from: document, file: path)
        configuration.resolvePaths(relativeTo: URL(fileURLWithPath: path).deletingLastPathComponent().path)
        configuration.file = path
        let found = configuration.problems()
        if !found.isEmpty { throw ConfigurationError.combining(found.map { Self.locating($0, in: document, path: path) }) }
        return (configuration, document)
    }

    /// `error` with where its setting is in the file, when the file gives it (`path:line:column: message`).
    static func locating(_ error: ConfigurationError, in document: StrictJSON, path: String) -> ConfigurationError {
        guard let setting = error.setting, let node = StrictJSONDecoder.node(atPath: setting, in: document.root) else { return error }
        return ConfigurationError("\(path):\(node.position.line):\(node.position.column): \(error.message)", setting: setting)
    }

    /// An error found after loading (a file the configuration names that cannot be read: a trusted root, a private
    /// key), located in the file the configuration was read from (``file``), read again for it.
    func located(_ error: ConfigurationError) -> ConfigurationError {
        guard let file, error.setting != nil, let data = FileManager.default.contents(atPath: file),
            let document = try? StrictJSON(bytes: Array(data))
        else { return error }
        return Self.locating(error, in: document, path: file)
    }

    /// Makes every relative file path absolute against `directory` (the configuration file's), so that the server
    /// reads the same files whatever directory it is started from.
    package mutating func resolvePaths(relativeTo directory: String) {
        func resolved(_ path: String) -> String {
            guard !path.hasPrefix("/"), !path.isEmpty else { return path }
            return URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: directory, isDirectory: true)).standardizedFileURL.path
        }
        for index in apps.indices {
            apps[index].trustedRoots = apps[index].trustedRoots.map { $0 == "apple" ? $0 : resolved($0) }
            for (environment, credentials) in apps[index].serverAPI {
                apps[index].serverAPI[environment]?.privateKeyFile = resolved(credentials.privateKeyFile)
            }
            apps[index].xcodeCertificate = apps[index].xcodeCertificate.map(resolved)
            if let file = apps[index].offers?.privateKeyFile { apps[index].offers?.privateKeyFile = resolved(file) }
        }
    }

    /// The customer cache's capacity and longest age.
    package var customerCacheLimits: (capacity: Int, maxAgeSeconds: Double) {
        (customerCache.capacity, customerCache.maxAgeSeconds)
    }

    /// The customer cache these settings describe.
    package func makeCustomerCache<Value: Sendable>(of _: Value.Type = Value.self) -> CustomerCache<Value> {
        CustomerCache(capacity: customerCache.capacity, maxAge: customerCache.maxAgeSeconds)
    }

    /// The lowercase hex SHA-256 of an API key, as stored in the configuration.
    package static func hash(apiKey: some StringProtocol) -> String {
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
