import AppStoreSigning
import ArgumentParser
import Foundation
import StorekeeperServer

/// `storekeeper sign …`: the signatures a developer's server makes for StoreKit, from the In-App Purchase key.
struct SignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Sign a promotional offer (V1 or JWS), an introductory-offer eligibility or an advanced commerce request.",
        subcommands: [OfferV1.self, OfferJWS.self, IntroEligibility.self, AdvancedCommerce.self]
    )

    /// A key from App Store Connect (Users and Access → Integrations): the In-App Purchase key for signatures, an API
    /// key for `storekeeper token`.
    struct KeyOptions: ParsableArguments {
        @Option(name: .customLong("issuer-id"), help: "Issuer ID from App Store Connect → Users and Access → Integrations.")
        var issuerID: String

        @Option(name: .customLong("key-id"), help: "The private key's ID.")
        var keyID: String

        @Option(name: .customLong("bundle-id"), help: "The app's bundle ID (the bid claim).")
        var bundleID: String

        @Option(name: .customLong("private-key"), help: "The .p8 private key file (mode 0600).")
        var privateKey: String

        func validate() throws {
            // Never echoed: it may be the key itself, pasted in the wrong place.
            guard ServerConfiguration.isKeyId(keyID) else {
                throw ValidationError("--key-id is not a key ID (letters and digits, like 2X9R4HXF34)")
            }
            // The token's `bid` claim: a bundle ID, and never a key pasted in the wrong place (not echoed).
            guard ServerConfiguration.isBundleId(bundleID) else {
                throw ValidationError("--bundle-id is not a bundle ID (letters, digits, '-' and '.', like com.example.app)")
            }
        }

        func key() throws -> AppStoreAPIKey {
            try AppStoreAPIKey(issuerID: issuerID, keyID: keyID, bundleID: bundleID, privateKeyFile: privateKey)
        }
    }

    struct OfferV1: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "offer-v1",
            abstract: "A promotional offer signature, V1 (StoreKit 1's SKPaymentDiscount; StoreKit 2 takes the signature's bytes), as JSON.")
        @OptionGroup var key: KeyOptions
        @Option(name: .customLong("product-id")) var productID: String
        @Option(name: .customLong("offer-id")) var offerID: String
        @Option(name: .customLong("app-account-token"), help: "The customer's app account token (empty when the app passes none).")
        var appAccountToken: String?

        func validate() throws {
            // StoreKit's token is a UUID; anything else would be signed and then never match the purchase's.
            if let appAccountToken, !appAccountToken.isEmpty, UUID(uuidString: appAccountToken) == nil {
                throw ValidationError("--app-account-token must be a UUID (or empty), not '\(appAccountToken.prefix(64))'")
            }
        }

        func run() async throws {
            try await reportingFailures {
                let signed = try OfferSignatures.signV1(key: try key.key(), productId: productID, offerId: offerID, appAccountToken: appAccountToken)
                struct Output: Encodable {
                    var signed: OfferSignatures.V1
                    var signatureBytes: [UInt8]
                    private enum CodingKeys: String, CodingKey { case keyIdentifier, nonce, timestamp, signature, signatureBytes }
                    func encode(to encoder: any Encoder) throws {
                        var container = encoder.container(keyedBy: CodingKeys.self)
                        try container.encode(signed.keyIdentifier, forKey: .keyIdentifier)
                        try container.encode(signed.nonce, forKey: .nonce)
                        try container.encode(signed.timestamp, forKey: .timestamp)
                        try container.encode(signed.signature, forKey: .signature)
                        try container.encode(signatureBytes, forKey: .signatureBytes)
                    }
                }
                try JSONOutput.print(Output(signed: signed, signatureBytes: [UInt8](Data(base64Encoded: signed.signature) ?? Data())))
            }
        }
    }

    struct OfferJWS: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "offer", abstract: "A promotional offer JWS (audience promotional-offer) for StoreKit 2.")
        @OptionGroup var key: KeyOptions
        @Option(name: .customLong("product-id")) var productID: String
        @Option(name: .customLong("offer-id")) var offerID: String
        @Option(name: .customLong("transaction-id"), help: "The customer's transaction ID (recommended).") var transactionID: String?

        func run() async throws {
            try await reportingFailures {
                print(
                    try OfferSignatures.promotionalOfferJWS(
                        key: try key.key(), productId: productID, offerIdentifier: offerID, transactionId: transactionID))
            }
        }
    }

    struct IntroEligibility: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "intro-eligibility", abstract: "An introductory-offer eligibility JWS for StoreKit 2.")
        @OptionGroup var key: KeyOptions
        @Option(name: .customLong("product-id")) var productID: String
        @Option(name: .customLong("transaction-id"), help: "The customer's transaction ID.") var transactionID: String
        @Option(help: "Whether the customer may have the introductory offer: true or false.") var allow: Bool

        func run() async throws {
            try await reportingFailures {
                print(
                    try OfferSignatures.introductoryOfferEligibilityJWS(
                        key: try key.key(), productId: productID, allowIntroductoryOffer: allow, transactionId: transactionID))
            }
        }
    }

    struct AdvancedCommerce: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "advanced-commerce", abstract: "Sign an Advanced Commerce API request (its JSON, given as @FILE or -).")
        @OptionGroup var key: KeyOptions
        @Argument(help: "The request's JSON: @FILE, - for standard input, or the JSON itself.") var request: String

        func run() async throws {
            try await reportingFailures {
                let json = try InputArgument.read(
                    request, notText: CLIError(code: "invalid-argument", message: "the request is not UTF-8 text: give its JSON (an object)"))
                print(try OfferSignatures.advancedCommerceJWS(key: try key.key(), requestJSON: Array(json.utf8)))
            }
        }
    }
}
