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
            guard let url = URL(string: base), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw CLIError(code: "invalid-option", message: "--base-url must be an http(s) URL, not '\(base)'")
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
            trustedRoots: try roots.isEmpty ? [.appleRootCAG3] : roots.map(VerifyCommand.loadCertificate)
        )
        configuration.bundleID = client.configuration.key.bundleID
        configuration.environment = client.configuration.endpoint.environment
        let decoder = SignedFieldDecoder(verifier: SignedDataVerifier(configuration: configuration))
        try JSONOutput.print(await decoder.decode(value, field: nil))
    }
}

/// Replaces signed fields (`signedTransactionInfo`, `signedTransactions`, `signedRenewalInfo`, `signedPayload`,
/// `signedAppTransactionInfo`) by their payloads: `{"verified": true, "payload": …}`, or
/// `{"verified": false, "error": …, "unverifiedPayload": …}` when verification fails.
struct SignedFieldDecoder {
    let verifier: SignedDataVerifier

    func decode(_ value: JSONValue, field: String?) async -> JSONValue {
        switch value {
        case .object(let fields):
            var result: [String: JSONValue] = [:]
            for (key, child) in fields { result[key] = await decode(child, field: key) }
            return .object(result)
        case .array(let items):
            var result: [JSONValue] = []
            for item in items { result.append(await decode(item, field: field)) }
            return .array(result)
        case .string(let text) where field?.hasPrefix("signed") == true && text.split(separator: ".").count == 3:
            return await verify(text, field: field!)
        default:
            return value
        }
    }

    private func verify(_ jws: String, field: String) async -> JSONValue {
        do {
            let payload: JSONValue
            switch field {
            case "signedRenewalInfo": payload = try JSONOutput.value(try await verifier.verifyRenewalInfo(jws).payload)
            case "signedPayload": payload = try JSONOutput.value(try await verifier.verifyNotification(jws).payload)
            case "signedAppTransactionInfo": payload = try JSONOutput.value(try await verifier.verifyAppTransaction(jws).payload)
            default: payload = try JSONOutput.value(try await verifier.verifyTransaction(jws).payload)
            }
            return .object(["verified": .bool(true), "payload": payload])
        } catch {
            let unverified = (try? UnverifiedJWS.unsafeDecode(jws).payload) ?? .null
            return .object(["verified": .bool(false), "error": .string("\(error)"), "unverifiedPayload": unverified])
        }
    }
}

// MARK: - Endpoints

struct APITransaction: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "transaction", abstract: "Get Transaction Info.")
    @OptionGroup var options: APIOptions
    @Argument var transactionId: String
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(try await client.transactionInfo(transactionId), client: client)
        }
    }
}

struct APIHistory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "history", abstract: "Get Transaction History (every page; v2 unless --v1).")
    @OptionGroup var options: APIOptions
    @Argument(help: "Any transaction ID of the customer.") var transactionId: String
    @Option(name: .customLong("product-id")) var productIds: [String] = []
    @Option(name: .customLong("product-type"), help: "Auto-Renewable Subscription, Non-Consumable, Consumable, Non-Renewing Subscription.")
    var productTypes: [String] = []
    @Option(name: .customLong("group")) var groups: [String] = []
    @Option(help: "ascending or descending.") var sort: String?
    @Option(help: "true or false.") var revoked: Bool?
    @Option(name: .customLong("start-date"), help: "ISO-8601.") var startDate: String?
    @Option(name: .customLong("end-date"), help: "ISO-8601.") var endDate: String?
    @Flag var v1 = false

    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            var query = TransactionHistoryQuery()
            query.productIds = productIds
            query.productTypes = productTypes.map(ProductType.init(rawValue:))
            query.subscriptionGroupIdentifiers = groups
            if let sort {
                guard let parsed = TransactionHistoryQuery.Sort(rawValue: sort.uppercased()) else {
                    throw CLIError(code: "invalid-option", message: "--sort must be ascending or descending")
                }
                query.sort = parsed
            }
            query.revoked = revoked
            query.startDate = try startDate.map(parseDate)
            query.endDate = try endDate.map(parseDate)
            let pages = try await client.transactionHistory(transactionId, query: query, version: v1 ? .v1 : .v2).all()
            try await options.print(pages, client: client)
        }
    }
}

func parseDate(_ text: String) throws -> Date {
    if let date = try? Date(text, strategy: .iso8601) { return date }
    if let date = try? Date(text + "T00:00:00Z", strategy: .iso8601) { return date }
    throw CLIError(code: "invalid-option", message: "'\(text)' is not an ISO-8601 date such as 2026-01-02T03:04:05Z")
}

struct APIStatuses: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "statuses", abstract: "Get All Subscription Statuses.")
    @OptionGroup var options: APIOptions
    @Argument var transactionId: String
    @Option(help: "Only these statuses (1-5); repeatable.") var status: [Int] = []
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(
                try await client.allSubscriptionStatuses(transactionId, status: status.map(SubscriptionStatus.init(rawValue:))), client: client)
        }
    }
}

struct APIRefunds: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "refunds", abstract: "Get Refund History (every page; v1 with --v1).")
    @OptionGroup var options: APIOptions
    @Argument var transactionId: String
    @Flag var v1 = false
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            if v1 {
                try await options.print(try await client.refundLookupV1(transactionId), client: client)
            } else {
                try await options.print(try await client.refundHistory(transactionId).all(), client: client)
            }
        }
    }
}

struct APILookupOrder: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "lookup-order", abstract: "Look Up Order ID (production only).")
    @OptionGroup var options: APIOptions
    @Argument var orderId: String
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(try await client.lookUpOrder(orderId), client: client)
        }
    }
}

struct APIExtend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "extend", abstract: "Extend a Subscription Renewal Date.")
    @OptionGroup var options: APIOptions
    @Argument var originalTransactionId: String
    @Option(help: "1-90.") var days: Int
    @Option(help: "0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.") var reason: Int
    @Option(name: .customLong("request-id"), help: "Default: a new UUID.") var requestID: String?
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            let request = ExtendRenewalDateRequest(
                extendByDays: days, extendReasonCode: .init(rawValue: reason), requestIdentifier: requestID ?? UUID().uuidString
            )
            try await options.print(try await client.extendRenewalDate(originalTransactionId, request), client: client)
        }
    }
}

struct APIMassExtend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mass-extend", abstract: "Extend Subscription Renewal Dates for All Active Subscribers.")
    @OptionGroup var options: APIOptions
    @Option var product: String
    @Option var days: Int
    @Option var reason: Int
    @Option(name: .customLong("request-id")) var requestID: String?
    @Option(help: "ISO 3166-1 alpha-3; repeatable; default all.") var storefront: [String] = []
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            let request = MassExtendRenewalDateRequest(
                requestIdentifier: requestID ?? UUID().uuidString, extendByDays: days, extendReasonCode: .init(rawValue: reason),
                productId: product, storefrontCountryCodes: storefront.isEmpty ? nil : storefront
            )
            try await options.print(try await client.extendRenewalDatesForAllActiveSubscribers(request), client: client)
        }
    }
}

struct APIMassExtendStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mass-extend-status", abstract: "Get Status of Subscription Renewal Date Extensions.")
    @OptionGroup var options: APIOptions
    @Option var product: String
    @Option(name: .customLong("request-id")) var requestID: String
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(try await client.massExtensionStatus(productId: product, requestIdentifier: requestID), client: client)
        }
    }
}

struct APIConsumption: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consumption", abstract: "Send Consumption Information (v2); only with the customer's consent."
    )
    @OptionGroup var options: APIOptions
    @Argument var transactionId: String
    @Flag(name: .customLong("customer-consented"), help: "Required: the customer consented to sharing.") var consented = false
    @Option(name: .customLong("delivery-status"), help: "DELIVERED, UNDELIVERED_QUALITY_ISSUE, …") var deliveryStatus: String
    @Option(name: .customLong("sample-content-provided")) var sampleContentProvided: Bool
    @Option(name: .customLong("consumption-percentage"), help: "Milliunits 0-100000.") var percentage: Int?
    @Option(name: .customLong("refund-preference"), help: "DECLINE, GRANT_FULL or GRANT_PRORATED.") var refundPreference: String?
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await client.sendConsumptionInformation(
                transactionId,
                .init(
                    customerConsented: consented, deliveryStatus: try known(DeliveryStatus.self, deliveryStatus, flag: "--delivery-status"),
                    sampleContentProvided: sampleContentProvided, consumptionPercentage: percentage,
                    refundPreference: try refundPreference.map { try known(RefundPreference.self, $0, flag: "--refund-preference") }
                ))
            print(#"{"accepted": true}"#)
        }
    }
}

struct APINotifications: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "notifications", abstract: "Get Notification History (every page).")
    @OptionGroup var options: APIOptions
    @Option(help: "ISO-8601 start.") var since: String
    @Option(help: "ISO-8601 end (default now).") var until: String?
    @Flag(name: .customLong("only-failures")) var onlyFailures = false
    @Option var type: String?
    @Option var subtype: String?
    @Option(name: .customLong("transaction-id")) var transactionId: String?
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            let request = NotificationHistoryRequest(
                startDate: try parseDate(since), endDate: try until.map(parseDate) ?? Date(),
                notificationType: try type.map { try known(NotificationType.self, $0, flag: "--type") },
                notificationSubtype: try subtype.map { try known(NotificationSubtype.self, $0, flag: "--subtype") },
                transactionId: transactionId, onlyFailures: onlyFailures ? true : nil
            )
            try await options.print(try await client.notificationHistory(request).all(), client: client)
        }
    }
}

struct APITestNotification: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "test-notification", abstract: "Request a Test Notification.")
    @OptionGroup var options: APIOptions
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(try await client.requestTestNotification(), client: client)
        }
    }
}

struct APITestNotificationStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "test-notification-status", abstract: "Get Test Notification Status.")
    @OptionGroup var options: APIOptions
    @Argument var token: String
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(try await client.testNotificationStatus(token), client: client)
        }
    }
}

struct APISetToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "set-token", abstract: "Set App Account Token.")
    @OptionGroup var options: APIOptions
    @Argument var originalTransactionId: String
    @Argument var appAccountToken: String
    func run() async throws {
        try await reportingFailures {
            guard let token = LowercaseUUID(uuidString: appAccountToken) else {
                throw CLIError(code: "invalid-option", message: "'\(appAccountToken)' is not a UUID")
            }
            let client = try options.makeClient()
            try await client.setAppAccountToken(originalTransactionId, token: token)
            print(#"{"ok": true}"#)
        }
    }
}

struct APIAppTransaction: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "app-transaction", abstract: "Get App Transaction Info.")
    @OptionGroup var options: APIOptions
    @Argument var transactionId: String
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await options.print(try await client.appTransactionInfo(transactionId), client: client)
        }
    }
}

struct APIFinish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "finish", abstract: "Finish Transaction.")
    @OptionGroup var options: APIOptions
    @Argument var transactionId: String
    func run() async throws {
        try await reportingFailures {
            let client = try options.makeClient()
            try await client.finishTransaction(transactionId)
            print(#"{"ok": true}"#)
        }
    }
}

/// A flag's value of one of Apple's open sets, known to this build: a typo is refused naming the values, never sent.
func known<Value: OpenWireValue>(_: Value.Type, _ text: String, flag: String) throws -> Value where Value.RawValue == String {
    let value = Value(rawValue: text)
    guard value.isKnown else {
        throw CLIError(
            code: "invalid-option", message: "\(flag) '\(text.prefix(64))' is not one of \(Value.knownValues.map(\.rawValue).joined(separator: ", "))"
        )
    }
    return value
}
