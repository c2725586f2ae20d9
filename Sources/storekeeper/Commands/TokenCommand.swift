import AppStoreSigning
import ArgumentParser
import Foundation

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a JWT for the App Store Server API (Authorization: Bearer <token>)."
    )

    @Option(name: .customLong("issuer-id"), help: "Issuer ID from App Store Connect → Users and Access → Integrations → Keys.")
    var issuerID: String

    @Option(name: .customLong("key-id"), help: "The private key's ID.")
    var keyID: String

    @Option(name: .customLong("bundle-id"), help: "The app's bundle ID (the token's bid claim).")
    var bundleID: String

    @Option(name: .customLong("private-key"), help: "The .p8 private key file.")
    var privateKey: String

    @Option(help: "Seconds until the token expires, at most 3600.")
    var lifetime: Int = Int(APIAuthToken.defaultLifetime)

    func run() async throws {
        try await reportingFailures {
            let key = try AppStoreAPIKey(issuerID: issuerID, keyID: keyID, bundleID: bundleID, privateKeyFile: privateKey)
            print(try APIAuthToken.make(key: key, lifetime: TimeInterval(lifetime)))
        }
    }
}
