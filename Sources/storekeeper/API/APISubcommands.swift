import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import ArgumentParser
import Foundation
import X509

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
                throw CLIError(code: "invalid-option", message: "\(UntrustedText.quoted(appAccountToken, limit: 64)) is not a UUID")
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
