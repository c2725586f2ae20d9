import AppStoreServerAPI
import ArgumentParser
import Foundation
import Logging
import StorekeeperCore
import StorekeeperServer

/// `storekeeper config …`: the configuration, as the server reads it.
struct ConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Check a configuration file the way `storekeeper serve` reads it.",
        subcommands: [ConfigCheck.self]
    )
}

struct ConfigCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Print every setting the server would run with, and whether the file or the default gave it; exit 1 on any mistake.",
        discussion: """
            Reads the file exactly as `serve` does: strict JSON (errors name the line and column), no unknown key (with \
            the nearest known one), every value of its type and range, relative paths resolved against the file's \
            directory; then reads every trusted root certificate and App Store Server API key. API key hashes are \
            masked. With --online, also asks the App Store once per app and environment with serverAPI credentials \
            whether it accepts them (the call `serve` makes at start).
            """
    )

    @Option(help: "The configuration file (JSON; see config.example.json).") var config: String
    @Flag(help: "Print the settings as JSON instead of lines.") var json = false
    @Flag(help: "Also ask the App Store whether it accepts each app's serverAPI credentials (one call each).") var online = false

    func run() async throws {
        do {
            let check = try ServerConfiguration.check(path: config)
            let configuration = check.configuration
            let verifiers = try configuration.makeVerifiers()
            let keys = try configuration.makeServerAPIKeys()
            var results: [CredentialCheck.Result] = []
            if online {
                var logger = Logger(label: "storekeeper")
                logger.logLevel = .critical
                for (app, client) in try configuration.makeServerAPIClients(logger: logger).sorted(by: { $0.key.description < $1.key.description }) {
                    results.append(await CredentialCheck.run(app, client: client))
                }
            }
            if json {
                struct Output: Encodable {
                    var file: String
                    var valid: Bool
                    var settings: [ServerConfiguration.Setting]
                    var credentials: [CredentialCheck.Result]?
                }
                try JSONOutput.print(
                    Output(
                        file: config, valid: results.allSatisfy { $0.outcome != .refused }, settings: check.settings,
                        credentials: online ? results : nil))
            } else {
                print("\(config): valid. What `storekeeper serve` runs with ([file]: set in the file; [default]: not set there):")
                print(check.text)
                print("")
                print("trusted roots read: \(verifiers.count) app and environment verifier(s)")
                print(
                    "App Store Server API keys loaded: \(keys.count)"
                        + (keys.isEmpty ? " (no serverAPI credentials: notification recovery and reconciliation are off)" : ""))
                for app in configuration.apps where app.serverAPI.isEmpty && !keys.isEmpty {
                    print("note: app '\(app.bundleId)' has no serverAPI credentials: its missed notifications are not recovered")
                }
                if configuration.apiKeys.isEmpty { print("note: no API keys: the app API (/v1/customers/…) refuses every request") }
                if !configuration.recovery.enabled && !keys.isEmpty {
                    print("note: recovery.enabled is false: missed notifications are not recovered")
                }
                for result in results {
                    print("credentials \(result.bundleId) \(result.environment): \(result.outcome.rawValue): \(result.detail)")
                }
            }
            if results.contains(where: { $0.outcome == .refused }) { throw ExitCode.failure }
        } catch let error as ExitCode {
            throw error
        } catch {
            reportError("\(error)")
            throw ExitCode.failure(for: error)
        }
    }
}
