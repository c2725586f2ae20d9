import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import ArgumentParser
import Foundation
import X509

/// `storekeeper api …`: call the App Store Server API (Apple's, or the simulator's with --base-url).
struct APICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "Call the App Store Server API and print decoded JSON (signed fields verified and decoded in place).",
        discussion: """
            Credentials come from flags or the environment: APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, APPSTORE_PRIVATE_KEY \
            (a .p8 file) or APPSTORE_PRIVATE_KEY_PEM (its text), APPSTORE_BUNDLE_ID, APPSTORE_ENVIRONMENT \
            (Production or Sandbox) and APPSTORE_BASE_URL (e.g. the simulator's http://127.0.0.1:8090).
            """,
        subcommands: [
            APITransaction.self, APIHistory.self, APIStatuses.self, APIRefunds.self, APILookupOrder.self, APIExtend.self,
            APIMassExtend.self, APIMassExtendStatus.self, APIConsumption.self, APINotifications.self,
            APITestNotification.self, APITestNotificationStatus.self, APISetToken.self, APIAppTransaction.self, APIFinish.self,
        ]
    )
}

/// Credentials, endpoint and output options shared by every `api` command.
struct APIOptions: ParsableArguments {
    @Option(name: .customLong("issuer-id"), help: "Issuer ID (env APPSTORE_ISSUER_ID).") var issuerID: String?
    @Option(name: .customLong("key-id"), help: "Key ID (env APPSTORE_KEY_ID).") var keyID: String?
    @Option(name: .customLong("private-key"), help: ".p8 file (env APPSTORE_PRIVATE_KEY, or APPSTORE_PRIVATE_KEY_PEM).") var privateKey: String?
    @Option(name: .customLong("bundle-id"), help: "Bundle ID (env APPSTORE_BUNDLE_ID).") var bundleID: String?
    @Option(help: "Production or Sandbox (env APPSTORE_ENVIRONMENT; default Sandbox).") var environment: String?
    @Option(name: .customLong("base-url"), help: "Another base URL, e.g. the simulator's (env APPSTORE_BASE_URL).") var baseURL: String?
    @Option(name: .customLong("root"), help: "Root certificate to verify signed fields with (default: Apple Root CA - G3).") var roots: [String] = []
    @Flag(help: "Print the API's JSON as it came, signed fields undecoded.") var raw = false
    @Flag(name: .customLong("no-retry"), help: "Send once; do not retry.") var noRetry = false

    func value(_ flag: String?, _ variable: String) -> String? {
        flag ?? ProcessInfo.processInfo.environment[variable].flatMap { $0.isEmpty ? nil : $0 }
    }

    func required(_ flag: String?, _ variable: String, _ name: String) throws -> String {
        guard let value = value(flag, variable) else {
            throw CLIError(code: "missing-credential", message: "give --\(name) or set \(variable)")
        }
        return value
    }

    func makeClient() throws -> AppStoreServerAPIClient {
        let issuer = try required(issuerID, "APPSTORE_ISSUER_ID", "issuer-id")
        let key = try required(keyID, "APPSTORE_KEY_ID", "key-id")
        let bundle = try required(bundleID, "APPSTORE_BUNDLE_ID", "bundle-id")
        let apiKey: AppStoreAPIKey
        if let file = value(privateKey, "APPSTORE_PRIVATE_KEY") {
            apiKey = try AppStoreAPIKey(issuerID: issuer, keyID: key, bundleID: bundle, privateKeyFile: file)
        } else if let pem = ProcessInfo.processInfo.environment["APPSTORE_PRIVATE_KEY_PEM"] {
            apiKey = try AppStoreAPIKey(issuerID: issuer, keyID: key, bundleID: bundle, privateKeyPEM: pem)
        } else {
            throw CLIError(code: "missing-credential", message: "give --private-key or set APPSTORE_PRIVATE_KEY or APPSTORE_PRIVATE_KEY_PEM")
        }
        let environment = try parseEnvironment(value(self.environment, "APPSTORE_ENVIRONMENT") ?? "Sandbox")
        let endpoint: AppStoreServerAPIClient.Endpoint
        if let base = value(baseURL, "APPSTORE_BASE_URL") {
            // Never echoed when it may hold credentials.
            let shown = base.contains("@") ? "" : ", not \(UntrustedText.quoted(base, limit: 200))"
            guard let url = URL(string: base), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw CLIError(code: "invalid-option", message: "--base-url must be an http(s) URL with a host\(shown)")
            }
            guard url.user == nil, url.password == nil else {
                throw CLIError(
                    code: "invalid-option",
                    message: "--base-url carries a user or password: remove it (the App Store Server API authenticates with the key)")
            }
            endpoint = .custom(baseURL: base, environment: environment)
        } else {
            endpoint = environment == .production ? .production : .sandbox
        }
        var configuration = AppStoreServerAPIClient.Configuration(key: apiKey, endpoint: endpoint)
        configuration.retry = noRetry ? .none : RetryPolicy(deadline: .seconds(30), attemptTimeout: .seconds(10))
        return AppStoreServerAPIClient(configuration: configuration)
    }

    /// Prints a response: raw, or with every signed field verified (or, without a usable root, decoded and marked
    /// unverified) and decoded in place.
    func print(_ response: some Encodable, client: AppStoreServerAPIClient) async throws {
        let value = try JSONOutput.value(response)
        guard !raw else { return try JSONOutput.print(value) }
        var configuration = SignedDataVerifier.Configuration.unsafeSkippingClaimChecks(
            trustedRoots: try roots.isEmpty ? [.appleRootCAG3] : roots.map { try VerifyCommand.loadCertificate($0) }
        )
        configuration.bundleID = client.configuration.key.bundleID
        configuration.environment = client.configuration.endpoint.environment
        let decoder = SignedFieldDecoder(verifier: SignedDataVerifier(configuration: configuration))
        try JSONOutput.print(await decoder.decode(value, field: nil))
    }
}
