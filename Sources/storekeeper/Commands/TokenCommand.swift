import AppStoreSigning
import ArgumentParser
import Foundation

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a JWT for the App Store Server API (Authorization: Bearer <token>)."
    )

    @OptionGroup var key: SignCommand.KeyOptions

    @Option(help: "Seconds until the token expires, at most 3600.")
    var lifetime: Int = Int(APIAuthToken.defaultLifetime)

    func validate() throws {
        guard (1...3_600).contains(lifetime) else {
            throw ValidationError("--lifetime must be 1 to 3600 seconds (Apple refuses a token that lives longer), not \(lifetime)")
        }
        // Apple's issuer IDs are UUIDs; a token with another `iss` is refused with a bare 401. Not echoed: it may be
        // the key itself, pasted in the wrong place.
        guard UUID(uuidString: key.issuerID) != nil else {
            throw ValidationError("--issuer-id is not an issuer ID (a UUID, like 57246542-96fe-1a63-e053-0824d011072a)")
        }
    }

    func run() async throws {
        try await reportingFailures {
            print(try APIAuthToken.make(key: try key.key(), lifetime: TimeInterval(lifetime)))
        }
    }
}
