package import AppStoreModels
package import Foundation

/// Everything the simulator knows, as one value: kept in the simulator's database (``SimulatorStore``), one row
/// per record, and loaded at start.
///
/// The engine changes it in place. Each table remembers which records were written since the last save, so a save
/// writes only those; and while an action runs, each keeps a journal of what it replaced, so a failed action is
/// undone in O(changes) (`beginJournal()`, `rollBack(to:)`).
package struct SimulatorState: Codable, Sendable {
    /// The layout of a `state.json` (the simulator's storage before its database), still read to import one.
    package static let currentFormatVersion = 1
    /// The clock, counters and configuration: the small parts, saved as one row.
    package var scalars: Scalars
    package var customers = RecordTable<Customer>()
    package var transactions = RecordTable<TransactionRecord>()
    /// Subscriptions by original transaction ID (purchased ones and family-shared copies).
    package var subscriptions = RecordTable<SubscriptionRecord>()
    /// Every notification, oldest first, with its delivery attempts.
    package var notifications = NotificationLog()
    /// Consumption information the developer sent, by transaction ID (the request body as sent).
    package var consumptionInformation = RecordTable<JSONValue>()
    /// Mass renewal-date extension requests by `productId|requestIdentifier`.
    package var massExtensions = RecordTable<MassExtension>()
    /// How many actions are running (nested); writes are journaled while one is.
    var journalDepth = 0

    package init(environment: AppStoreEnvironment, renewalRate: RenewalRate, now: Date) {
        scalars = Scalars(environment: environment, renewalRate: renewalRate, now: now)
    }

    /// The small parts of the state: everything but the tables, whose size does not grow with history.
    package struct Scalars: Codable, Hashable, Sendable {
        var formatVersion = SimulatorState.currentFormatVersion
        var environment: AppStoreEnvironment
        var renewalRate: RenewalRate
        var now: Date
        var lastSignedDate: Date?
        var removedFromSale: Set<String> = []
        var refundRequests: [String: ConsumptionRequestReason] = [:]
        var faults = FaultConfiguration()
        var notificationURL: String?
        var clockRunning = false
        var counters = Counters()
        /// The offer signatures' nonces used, with when each was signed (kept while a signature could be valid).
        var offerNonces: [String: Date]?
    }

    struct Counters: Codable, Hashable, Sendable {
        var transaction: Int64 = 2_000_000_000_000_000
        var webOrderLineItem: Int64 = 2_000_000_900_000_000
        var appTransaction: Int64 = 704_000_000_000_000_000
        var order: Int64 = 0
    }

    /// Moves every identifier counter (transaction, web order line item, app transaction, order) on by `amount`: for
    /// tools that build a large population in several engines, one after the other, whose IDs must not collide.
    package mutating func offsetIdentifiers(by amount: Int64) {
        scalars.counters.transaction += amount
        scalars.counters.webOrderLineItem += amount
        scalars.counters.appTransaction += amount
        scalars.counters.order += amount
    }

    /// The layout of `state.json` this build reads (``currentFormatVersion``).
    package var formatVersion: Int {
        get { scalars.formatVersion }
        set { scalars.formatVersion = newValue }
    }
    /// The environment the simulator signs for.
    package var environment: AppStoreEnvironment {
        get { scalars.environment }
        set { scalars.environment = newValue }
    }
    /// How long subscription periods last on the clock.
    package var renewalRate: RenewalRate {
        get { scalars.renewalRate }
        set { scalars.renewalRate = newValue }
    }
    /// The virtual clock: it moves only when told.
    package var now: Date {
        get { scalars.now }
        set { scalars.now = newValue }
    }
    /// When the last notification was signed (signing dates only increase).
    package var lastSignedDate: Date? {
        get { scalars.lastSignedDate }
        set { scalars.lastSignedDate = newValue }
    }
    /// Products no longer for sale: their subscriptions expire at the next renewal.
    package var removedFromSale: Set<String> {
        get { scalars.removedFromSale }
        set { scalars.removedFromSale = newValue }
    }
    /// Open refund requests by transaction ID, with the reason the customer gave.
    package var refundRequests: [String: ConsumptionRequestReason] {
        get { scalars.refundRequests }
        set { scalars.refundRequests = newValue }
    }
    /// Faults injected into the API and notification delivery.
    package var faults: FaultConfiguration {
        get { scalars.faults }
        set { scalars.faults = newValue }
    }
    /// Where notifications are POSTed; `nil` for nowhere (Request a Test Notification then answers 4040007).
    package var notificationURL: String? {
        get { scalars.notificationURL }
        set { scalars.notificationURL = newValue }
    }
    /// Whether the clock follows real time while the simulator is served (otherwise it moves only when told).
    package var clockRunning: Bool {
        get { scalars.clockRunning }
        set { scalars.clockRunning = newValue }
    }
    var counters: Counters {
        get { scalars.counters }
        set { scalars.counters = newValue }
    }

    // MARK: - Coding (the layout of state.json, format 1)

    private enum TableKeys: String, CodingKey {
        case customers, transactions, subscriptions, notifications, consumptionInformation, massExtensions
    }

    package init(from decoder: any Decoder) throws {
        scalars = try Scalars(from: decoder)
        let container = try decoder.container(keyedBy: TableKeys.self)
        customers = try container.decode(RecordTable<Customer>.self, forKey: .customers)
        transactions = try container.decode(RecordTable<TransactionRecord>.self, forKey: .transactions)
        subscriptions = try container.decode(RecordTable<SubscriptionRecord>.self, forKey: .subscriptions)
        notifications = try container.decode(NotificationLog.self, forKey: .notifications)
        consumptionInformation = try container.decode(RecordTable<JSONValue>.self, forKey: .consumptionInformation)
        massExtensions = try container.decode(RecordTable<MassExtension>.self, forKey: .massExtensions)
    }

    package func encode(to encoder: any Encoder) throws {
        try scalars.encode(to: encoder)
        var container = encoder.container(keyedBy: TableKeys.self)
        try container.encode(customers, forKey: .customers)
        try container.encode(transactions, forKey: .transactions)
        try container.encode(subscriptions, forKey: .subscriptions)
        try container.encode(notifications, forKey: .notifications)
        try container.encode(consumptionInformation, forKey: .consumptionInformation)
        try container.encode(massExtensions, forKey: .massExtensions)
    }
}

/// A request to extend the renewal date of every active subscriber of a product.
package struct MassExtension: TableRecord, Hashable, Sendable {
    package var requestIdentifier: String
    package var productId: String
    package var bundleId: String
    package var storefrontCountryCodes: [String]?
    package var completeDate: Date?
    package var succeededCount: Int64 = 0
    package var failedCount: Int64 = 0
}

/// An Apple Account.
package struct Customer: TableRecord, Hashable, Sendable {
    package var id: String
    /// ISO 3166-1 alpha-3.
    package var storefront: String
    package var familyId: String?
    /// Whether the account's payment method works; renewals fail while it does not.
    package var billingWorks: Bool = true
    /// The customer's `appTransactionId` per bundle ID (one per account per app).
    package var appTransactionIds: [String: String] = [:]

    /// Indexed by family and by app transaction ID.
    package var indexKeys: [RecordIndexKey] {
        (familyId.map { [RecordIndexKey.family($0)] } ?? []) + appTransactionIds.values.sorted().map(RecordIndexKey.appTransaction)
    }
}

extension RecordIndexKey {
    /// The customers in a family.
    package static func family(_ id: String) -> RecordIndexKey { .init(kind: "family", value: id) }
    /// The customer an app transaction ID belongs to.
    package static func appTransaction(_ id: String) -> RecordIndexKey { .init(kind: "appTransaction", value: id) }
    /// The transactions of one order (the order ID on the customer's receipt).
    package static func order(_ id: String) -> RecordIndexKey { .init(kind: "order", value: id) }
}

/// A transaction as the App Store holds it now (refunds and upgrades change it after the fact).
package struct TransactionRecord: Codable, Hashable, Sendable {
    package var info: TransactionInfo
    package var customerId: String
    /// The order ID on the customer's emailed receipt.
    package var orderId: String
    /// The "recently modified date" that sorts transaction history.
    package var modifiedAt: Date
    /// Whether the app or server finished it (Finish Transaction).
    package var finished: Bool = false

    /// Indexed by customer and by order ID.
    package var indexKeys: [RecordIndexKey] { [.customer(customerId), .order(orderId)] }
}

/// One auto-renewable subscription of one customer (or a family member's shared copy).
package struct SubscriptionRecord: Codable, Hashable, Sendable {
    package var originalTransactionId: String
    package var customerId: String
    package var bundleId: String
    package var groupId: String
    package var productId: String
    package var autoRenewProductId: String
    package var autoRenewEnabled: Bool = true
    package var status: SubscriptionStatus = .active
    package var expiresDate: Date
    package var gracePeriodExpiresDate: Date?
    /// When billing retry gives up (set while in grace or billing retry).
    package var billingRetryEndsAt: Date?
    package var expirationIntent: ExpirationIntent?
    package var latestTransactionId: String
    package var ownership: InAppOwnershipType = .purchased
    /// For a family member's copy: the purchaser's original transaction ID.
    package var sharedFrom: String?
    /// For a purchaser's subscription: the copies' original transaction IDs by member customer ID.
    package var familyCopies: [String: String] = [:]
    package var priceIncrease: PriceIncrease?
    /// An offer that applies to coming renewals.
    package var pendingOffer: PendingOffer?
    /// When renewal-date extensions were granted (at most two per 365 days).
    package var extensionDates: [Date] = []
    package var appAccountToken: LowercaseUUID?
    package var recentSubscriptionStartDate: Date
    /// Periods the customer paid for (offers with a price count; free trials do not).
    package var paidPeriods: Int = 0
    /// Successful automatic renewals since the last purchase (sandbox stops after 12).
    package var renewalCount: Int = 0

    /// A price increase announced for this subscription.
    package struct PriceIncrease: Codable, Hashable, Sendable {
        package var newPrice: Int64
        package var consentRequired: Bool
        package var accepted: Bool
    }

    /// An offer the coming renewals use.
    package struct PendingOffer: Codable, Hashable, Sendable {
        package var offer: Catalog.Offer
        package var remainingPeriods: Int
    }

    /// Whether the customer has service now: active or in Billing Grace Period.
    package var hasService: Bool { status == .active || status == .billingGracePeriod }

    /// When the lifecycle engine must next act on a purchased subscription: renew it (active), end its grace period,
    /// or end billing retry. Family copies follow their purchaser and are never due themselves.
    package var dueDate: Date? {
        guard sharedFrom == nil else { return nil }
        switch status {
        case .active: return expiresDate
        case .billingGracePeriod: return gracePeriodExpiresDate
        case .billingRetry: return billingRetryEndsAt
        default: return nil
        }
    }

    /// A new period began with `transaction` (purchase, upgrade, renewal or recovery): active on its product
    /// until its expiry, with any billing trouble cleared.
    mutating func beginPeriod(with transaction: TransactionInfo) {
        productId = transaction.productId
        latestTransactionId = transaction.transactionId
        expiresDate = transaction.expiresDate ?? expiresDate
        status = .active
        gracePeriodExpiresDate = nil
        billingRetryEndsAt = nil
        expirationIntent = nil
        if (transaction.price ?? 0) > 0 { paidPeriods += 1 }
    }
}

/// A notification and its delivery attempts.
package struct NotificationRecord: Codable, Hashable, Sendable {
    package var notificationUUID: String
    package var notificationType: NotificationType
    package var subtype: NotificationSubtype?
    /// The signed notification as sent (and re-sent on retries).
    package var signedPayload: String
    package var createdAt: Date
    package var bundleId: String
    /// The customer it concerns, for history look-ups by any of their transaction IDs.
    package var customerId: String?
    package var originalTransactionId: String?
    package var transactionId: String?
    package var sendAttempts: [SendAttempt] = []
    /// When the next delivery attempt is due; `nil` once delivered or given up.
    package var nextAttemptAt: Date?
    /// Requested with Request a Test Notification: its token.
    package var testNotificationToken: String?

    /// One delivery attempt.
    package struct SendAttempt: Codable, Hashable, Sendable {
        package var attemptDate: Date
        /// `SUCCESS`, `TIMED_OUT`, `UNSUCCESSFUL_HTTP_RESPONSE_CODE`, … (APPSTORE-SPEC §1.5).
        package var sendAttemptResult: String
    }

    /// Whether the last attempt failed (or none was made yet), for `onlyFailures`.
    package var isFailure: Bool { sendAttempts.last?.sendAttemptResult != "SUCCESS" }
}

extension TransactionRecord: CustomerOwnedRecord {}
extension SubscriptionRecord: CustomerOwnedRecord {}
extension JSONValue: TableRecord {}
