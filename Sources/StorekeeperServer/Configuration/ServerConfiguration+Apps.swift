import AppStoreModels
package import AppStoreReceipts
package import AppStoreServerAPI
package import AppStoreSigning
import Foundation
package import Logging
package import StorekeeperCore
import X509

/// App Store Server API credentials of one app in one environment (a key from App Store Connect → Users and Access →
/// Integrations → In-App Purchase). Only the path of the private key is kept in the configuration.
package struct ServerAPICredentials: Codable, Sendable {
    /// The issuer ID (a UUID) from App Store Connect.
    package var issuerId: String
    /// The key's ID, e.g. `2X9R4HXF34`.
    package var keyId: String
    /// Path of the `.p8` file (PKCS #8 PEM, P-256), readable by its owner only; a relative path is resolved against
    /// the configuration file's directory.
    package var privateKeyFile: String
    /// Another base URL (the simulator's, e.g. `http://127.0.0.1:8090`); Apple's for the environment when absent.
    package var baseURL: String?

    package init(issuerId: String, keyId: String, privateKeyFile: String, baseURL: String? = nil) {
        self.issuerId = issuerId
        self.keyId = keyId
        self.privateKeyFile = privateKeyFile
        self.baseURL = baseURL
    }

    private enum CodingKeys: String, CodingKey { case issuerId, keyId, privateKeyFile, baseURL }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(issuerId, forKey: .issuerId)
        try container.encode(keyId, forKey: .keyId)
        try container.encode(privateKeyFile, forKey: .privateKeyFile)
        try container.encode(baseURL, forKey: .baseURL)
    }
}

extension ServerConfiguration {
    /// A verifier for each app and environment it accepts; errors name the app and the root file, and say in words
    /// what is wrong with it.
    package func makeVerifiers() throws(ConfigurationError) -> [VerifierKey: SignedDataVerifier] {
        do {
            return try verifiers()
        } catch {
            throw located(error)
        }
    }

    private func verifiers() throws(ConfigurationError) -> [VerifierKey: SignedDataVerifier] {
        var verifiers: [VerifierKey: SignedDataVerifier] = [:]
        for (index, app) in apps.enumerated() {
            var roots: [Certificate] = []
            for (offset, root) in app.trustedRoots.enumerated() {
                roots.append(
                    root == "apple"
                        ? .appleRootCAG3 : try Self.loadCertificate(root, app: app.bundleId, setting: "apps[\(index)].trustedRoots[\(offset)]"))
            }
            for environment in app.environments {
                let configuration: SignedDataVerifier.Configuration
                do {
                    if environment == .xcode {
                        // StoreKit testing in Xcode: the exported certificate alone, never an App Store root.
                        let certificate: Certificate
                        switch CertificateFile.load(app.xcodeCertificate ?? "") {
                        case .success(let loaded): certificate = loaded
                        case .failure(let problem):
                            throw ConfigurationError(
                                "app '\(app.bundleId)': the xcodeCertificate \(CertificateFile.describe(problem, UntrustedText.quoted(app.xcodeCertificate ?? "", limit: 256)))",
                                setting: "apps[\(index)].xcodeCertificate")
                        }
                        configuration = try SignedDataVerifier.Configuration.xcode(bundleID: app.bundleId, certificate: certificate)
                    } else {
                        configuration = try SignedDataVerifier.Configuration(
                            bundleID: app.bundleId, appAppleID: app.appAppleId, environment: environment, trustedRoots: roots
                        )
                    }
                } catch let error as ConfigurationError {
                    throw error
                } catch {
                    throw ConfigurationError("app '\(app.bundleId)' (\(environment.rawValue)): \(error)")
                }
                verifiers[VerifierKey(bundleId: app.bundleId, environment: environment)] = SignedDataVerifier(configuration: configuration)
            }
        }
        return verifiers
    }

    /// An app receipt verifier for each app: its trusted roots (`"apple"`: the 2006 Apple Root CA that receipts chain
    /// to; a file: the same certificate as for its signed data, e.g. a simulator's root) and its Xcode certificate.
    package func makeReceiptVerifiers() throws(ConfigurationError) -> [String: ReceiptVerifier] {
        var verifiers: [String: ReceiptVerifier] = [:]
        for (index, app) in apps.enumerated() {
            var roots: [Certificate] = []
            for (offset, root) in app.trustedRoots.enumerated() {
                do {
                    roots.append(
                        root == "apple"
                            ? .appleIncRoot : try Self.loadCertificate(root, app: app.bundleId, setting: "apps[\(index)].trustedRoots[\(offset)]"))
                } catch {
                    throw located(error)
                }
            }
            var xcode: Certificate?
            if app.environments.contains(.xcode), let path = app.xcodeCertificate, case .success(let certificate) = CertificateFile.load(path) {
                xcode = certificate
            }
            verifiers[app.bundleId] = ReceiptVerifier(roots: roots, xcodeCertificate: xcode)
        }
        return verifiers
    }

    /// The key that signs each app's subscription offers (apps with `offers`), loaded and checked like the App Store
    /// Server API's (a file others may read is refused); errors name the app and the file, never the key.
    package func makeOfferKeys() throws(ConfigurationError) -> [String: AppStoreAPIKey] {
        var keys: [String: AppStoreAPIKey] = [:]
        for (appIndex, app) in apps.enumerated() {
            guard let offers = app.offers else { continue }
            let which = "app '\(app.bundleId)'"
            guard UUID(uuidString: offers.issuerId) != nil else {
                throw ConfigurationError(
                    "\(which): offers.issuerId must be a UUID (App Store Connect → Users and Access → Integrations)",
                    setting: "apps[\(appIndex)].offers.issuerId")
            }
            guard Self.isKeyId(offers.keyId) else {
                // Never echoed: it may be the key's text, pasted in the wrong place.
                throw ConfigurationError(
                    "\(which): offers.keyId is not a key ID (letters and digits, like 2X9R4HXF34)", setting: "apps[\(appIndex)].offers.keyId")
            }
            if let problem = offers.policy.problem() {
                throw ConfigurationError("\(which): offers.\(problem.message)", setting: "apps[\(appIndex)].offers.\(problem.setting)")
            }
            do {
                keys[app.bundleId] = try AppStoreAPIKey(
                    issuerID: offers.issuerId, keyID: offers.keyId, bundleID: app.bundleId, privateKeyFile: offers.privateKeyFile)
            } catch {
                throw ConfigurationError("\(which): offers.privateKeyFile: \(error.message)", setting: "apps[\(appIndex)].offers.privateKeyFile")
            }
        }
        return keys
    }

    /// An account importer for each app and environment with a client and a verifier, under the configured restore
    /// policy (receipt migration and `storekeeper import`).
    package func makeImporters(
        store: any LedgerStore, clients: [VerifierKey: AppStoreServerAPIClient], verifiers: [VerifierKey: SignedDataVerifier], logger: Logger
    ) -> [VerifierKey: AccountImporter] {
        var importers: [VerifierKey: AccountImporter] = [:]
        for (app, client) in clients {
            guard let verifier = verifiers[app] else { continue }
            var importer = AccountImporter(app: app, client: client, verifier: verifier, store: store, logger: logger)
            importer.restorePolicy = restorePolicy
            importers[app] = importer
        }
        return importers
    }

    /// A trusted root certificate file, PEM or DER.
    /// `setting`: where the configuration names it (`apps[0].trustedRoots[1]`).
    static func loadCertificate(_ path: String, app: String, setting: String? = nil) throws(ConfigurationError) -> Certificate {
        switch CertificateFile.load(path) {
        case .success(let certificate): return certificate
        case .failure(.missing):
            throw ConfigurationError(
                "app '\(app)': the trusted root \(UntrustedText.quoted(path, limit: 256)) does not exist (\"apple\" means Apple Root CA - G3)",
                setting: setting)
        case .failure(let problem):
            throw ConfigurationError(
                "app '\(app)': the trusted root \(CertificateFile.describe(problem, UntrustedText.quoted(path, limit: 256)))", setting: setting)
        }
    }

    /// A client of the App Store Server API for each app and environment that has credentials (Apple's base URL for
    /// the environment, or the configured one), pacing its calls at 95 % of Apple's rate limits: the server's jobs
    /// (recovery, reconciliation) are its only callers, and Apple enforces the limits over an hour.
    /// `share`: the part of Apple's limits the clients keep to (0.95 for the server's jobs; a caller beside them, a
    /// dry run while a server's job runs, takes less).
    package func makeServerAPIClients(logger: Logger, share: Double = 0.95) throws(ConfigurationError) -> [VerifierKey: AppStoreServerAPIClient] {
        var clients: [VerifierKey: AppStoreServerAPIClient] = [:]
        for (which, credentials) in try makeServerAPIKeys() {
            var configuration = AppStoreServerAPIClient.Configuration(
                key: credentials.key, endpoint: Self.endpoint(credentials.baseURL, which.environment))
            configuration.rateLimiting = .appleShare(share)
            clients[which] = AppStoreServerAPIClient(configuration: configuration, logger: logger)
        }
        return clients
    }

    /// Where an app's App Store Server API is in an environment: the configured base URL, or Apple's.
    static func endpoint(_ baseURL: String?, _ environment: AppStoreEnvironment) -> AppStoreServerAPIClient.Endpoint {
        baseURL.map { .custom(baseURL: $0, environment: environment) } ?? (environment == .production ? .production : .sandbox)
    }

    /// The App Store Server API key of each app and environment that has credentials, loaded and checked (a key
    /// file that group or others may read is refused); errors name the app, the environment and the file, never the
    /// key.
    package func makeServerAPIKeys() throws(ConfigurationError) -> [VerifierKey: (key: AppStoreAPIKey, baseURL: String?)] {
        do {
            return try serverAPIKeys()
        } catch {
            throw located(error)
        }
    }

    private func serverAPIKeys() throws(ConfigurationError) -> [VerifierKey: (key: AppStoreAPIKey, baseURL: String?)] {
        var keys: [VerifierKey: (key: AppStoreAPIKey, baseURL: String?)] = [:]
        for (index, app) in apps.enumerated() {
            // In name order, so that the first error reported is the same on every run.
            for (name, credentials) in app.serverAPI.sorted(by: { $0.key < $1.key }) {
                let environment = AppStoreEnvironment(rawValue: name)
                let which = "app '\(app.bundleId)' (\(UntrustedText.escaped(name, limit: 64)))"
                let at = "apps[\(index)].serverAPI[\"\(name)\"]"
                guard app.environments.contains(environment) else {
                    throw ConfigurationError(
                        "app '\(app.bundleId)': serverAPI credentials for '\(UntrustedText.escaped(name, limit: 64))', an environment the app does not accept",
                        setting: at)
                }
                guard UUID(uuidString: credentials.issuerId) != nil else {
                    throw ConfigurationError(
                        "\(which): serverAPI issuerId must be a UUID (App Store Connect → Users and Access → Integrations)", setting: "\(at).issuerId"
                    )
                }
                guard !credentials.keyId.isEmpty else {
                    throw ConfigurationError("\(which): serverAPI keyId is empty", setting: "\(at).keyId")
                }
                if let base = credentials.baseURL {
                    let url = URL(string: base)
                    guard url?.user == nil, url?.password == nil else {
                        // Never echoed: it holds a password.
                        throw ConfigurationError(
                            "\(which): serverAPI baseURL carries a user or password: remove it (the App Store Server API authenticates with the key)",
                            setting: "\(at).baseURL")
                    }
                    guard url?.scheme.map({ ["http", "https"].contains($0) }) == true, url?.host != nil else {
                        throw ConfigurationError(
                            "\(which): serverAPI baseURL \(UntrustedText.quoted(base, limit: 256)) is not an http(s) URL", setting: "\(at).baseURL")
                    }
                }
                let key: AppStoreAPIKey
                do {
                    key = try AppStoreAPIKey(
                        issuerID: credentials.issuerId, keyID: credentials.keyId, bundleID: app.bundleId,
                        privateKeyFile: credentials.privateKeyFile
                    )
                } catch {
                    throw ConfigurationError("\(which): serverAPI privateKeyFile: \(error.message)", setting: "\(at).privateKeyFile")
                }
                keys[VerifierKey(bundleId: app.bundleId, environment: environment)] = (key, credentials.baseURL)
            }
        }
        return keys
    }
}
