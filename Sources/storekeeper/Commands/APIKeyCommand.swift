import AppStoreModels
import ArgumentParser
import Crypto
import Foundation
import StorekeeperServer

struct APIKeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-key",
        abstract:
            "Make a new API key for the app API or the support API; prints the key (give it to the app or the support desk) and the sha256 for the configuration."
    )

    @Option(help: "app (one app's customers), support (the support API: one app's or every app's) or admin (any).") var scope: String = "app"
    @Option(name: .customLong("bundle-id"), help: "For app keys: the app; for support keys, the app (none: every app).") var bundleID: String?
    @Option(help: "A name for the key (default: the scope's, as \"support key\").") var name: String?

    func run() throws {
        guard let parsed = ServerConfiguration.APIKey.Scope(rawValue: scope) else {
            throw ValidationError("--scope must be app, support or admin")
        }
        if parsed == .app && bundleID == nil { throw ValidationError("an app key needs --bundle-id") }
        if let bundleID, !ServerConfiguration.isBundleId(bundleID) {
            throw ValidationError("--bundle-id \(UntrustedText.quoted(bundleID, limit: 64)) is not a bundle ID: letters, digits, '.' and '-'")
        }
        if let name, let problem = ServerConfiguration.keyNameProblem(name) {
            throw ValidationError(
                "--name \(ServerConfiguration.holdsSecret(name) ? "" : UntrustedText.quoted(name, limit: 64) + " ")\(problem): it must be 1 to \(ServerConfiguration.keyNameLimit) characters, "
                    + "none of them a control character, and no white space at either end (it is what logs show)")
        }
        if parsed == .admin && bundleID != nil {
            throw ValidationError("an admin key acts for every app: leave --bundle-id out, or give --scope app")
        }
        let key = Self.newKey()
        let entry = ServerConfiguration.APIKey(
            name: name ?? "\(parsed.rawValue) key", sha256: ServerConfiguration.hash(apiKey: key), scope: parsed, bundleId: bundleID)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        print("key (shown once; the server keeps only its hash): \(key)")
        print("configuration entry for \"apiKeys\":")
        print(String(decoding: try encoder.encode(entry), as: UTF8.self))
    }

    /// A new random API key: `sk_` and 256 random bits in base64url.
    static func newKey() -> String {
        let bytes = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
        return "sk_"
            + bytes.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
