import AppStoreModels
import AppStoreSigning
import ArgumentParser
import Foundation

struct DecodeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode",
        abstract: "Print a JWS's header and payload WITHOUT verifying it.",
        discussion: "Nothing is checked: not the signature, not the certificates, not the claims. Use `storekeeper verify` to trust data."
    )

    @Argument(help: "The JWS, @FILE, or - for standard input.")
    var input: String

    struct Output: Encodable {
        var verified = false
        var warning = "UNVERIFIED: decoded only; signature, certificates and claims were not checked"
        var header: JSONValue
        var payload: JSONValue
    }

    func run() async throws {
        try await reportingFailures {
            let decoded = try UnverifiedJWS.unsafeDecode(try InputArgument.read(input))
            try JSONOutput.print(Output(header: decoded.header, payload: decoded.payload))
        }
    }
}
