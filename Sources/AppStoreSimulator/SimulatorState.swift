public import AppStoreModels
public import Foundation
public import HashTreeCollections

/// Everything the simulator knows, as one value: saved to `state.json` after every change and loaded at start.
public struct SimulatorState: Codable, Sendable {
    /// The layout of `state.json`; a simulator refuses a file of another layout with a clear message.
    public static let currentFormatVersion = 1
    public var formatVersion = SimulatorState.currentFormatVersion
    /// The environment the simulator signs for.
    public var environment: AppStoreEnvironment
    /// How long subscription periods last on the clock.
    public var renewalRate: RenewalRate
    /// The virtual clock: it moves only when told.
    public var now: Date
    /// When the last notification was signed (signing dates only increase).
    public var lastSignedDate: Date?
    // The growing collections are persistent hash tries (encoded exactly like dictionaries): the engine keeps the
    // state before each action to roll back to, and with a trie a change after that costs O(log n) instead of a
    // copy of the whole collection.
    public var customers: TreeDictionary<String, Customer> = [:]
    public var transactions = RecordTable<TransactionRecord>()
    /// Subscriptions by original transaction ID (purchased ones and family-shared copies).
    public var subscriptions = RecordTable<SubscriptionRecord>()
    /// Every notification, oldest first. Actions only append to it (delivery attempts are recorded outside actions),
    /// which is how the engine rolls it back cheaply.
    public var notifications: [NotificationRecord] = []
    /// Products no longer for sale: their subscriptions expire at the next renewal.
    public var removedFromSale: Set<String> = []
    /// Open refund requests by transaction ID, with the reason the customer gave.
    public var refundRequests: [String: ConsumptionRequestReason] = [:]
    /// Consumption information the developer sent, by transaction ID (the request body as sent).
    public var consumptionInformation: [String: JSONValue] = [:]
    /// Mass renewal-date extension requests by `productId|requestIdentifier`.
    public var massExtensions: [String: MassExtension] = [:]
    /// Faults injected into the API and notification delivery.
    public var faults = FaultConfiguration()
    /// Where notifications are POSTed; `nil` for nowhere (Request a Test Notification then answers 4040007).
    public var notificationURL: String?
    /// Whether the clock follows real time while the simulator is served (otherwise it moves only when told).
    public var clockRunning = false
    var counters = Counters()

    struct Counters: Codable, Sendable {
        var transaction: Int64 = 2_000_000_000_000_000
        var webOrderLineItem: Int64 = 2_000_000_900_000_000
        var appTransaction: Int64 = 704_000_000_000_000_000
        var order: Int64 = 0
    }

    public init(environment: AppStoreEnvironment, renewalRate: RenewalRate, now: Date) {
        self.environment = environment
        self.renewalRate = renewalRate
        self.now = now
    }
}

/// A request to extend the renewal date of every active subscriber of a product.
public struct MassExtension: Codable, Hashable, Sendable {
    public var requestIdentifier: String
    public var productId: String
    public var bundleId: String
    public var storefrontCountryCodes: [String]?
    public var completeDate: Date?
    public var succeededCount: Int64 = 0
    public var failedCount: Int64 = 0
}

/// An Apple Account.
public struct Customer: Codable, Hashable, Sendable {
    public var id: String
    /// ISO 3166-1 alpha-3.
    public var storefront: String
    public var familyId: String?
    /// Whether the account's payment method works; renewals fail while it does not.
    public var billingWorks: Bool = true
    /// The customer's `appTransactionId` per bundle ID (one per account per app).
    public var appTransactionIds: [String: String] = [:]
}

/// A transaction as the App Store holds it now (refunds and upgrades change it after the fact).
public struct TransactionRecord: Codable, Hashable, Sendable {
    public var info: TransactionInfo
    public var customerId: String
    /// The order ID on the customer's emailed receipt.
    public var orderId: String
    /// The "recently modified date" that sorts transaction history.
    public var modifiedAt: Date
    /// Whether the app or server finished it (Finish Transaction).
    public var finished: Bool = false
}

/// One auto-renewable subscription of one customer (or a family member's shared copy).
public struct SubscriptionRecord: Codable, Hashable, Sendable {
    public var originalTransactionId: String
    public var customerId: String
    public var bundleId: String
    public var groupId: String
    public var productId: String
    public var autoRenewProductId: String
    public var autoRenewEnabled: Bool = true
    public var status: SubscriptionStatus = .active
    public var expiresDate: Date
    public var gracePeriodExpiresDate: Date?
    /// When billing retry gives up (set while in grace or billing retry).
    public var billingRetryEndsAt: Date?
    public var expirationIntent: ExpirationIntent?
    public var latestTransactionId: String
    public var ownership: InAppOwnershipType = .purchased
    /// For a family member's copy: the purchaser's original transaction ID.
    public var sharedFrom: String?
    /// For a purchaser's subscription: the copies' original transaction IDs by member customer ID.
    public var familyCopies: [String: String] = [:]
    public var priceIncrease: PriceIncrease?
    /// An offer that applies to coming renewals.
    public var pendingOffer: PendingOffer?
    /// When renewal-date extensions were granted (at most two per 365 days).
    public var extensionDates: [Date] = []
    public var appAccountToken: LowercaseUUID?
    public var recentSubscriptionStartDate: Date
    /// Periods the customer paid for (offers with a price count; free trials do not).
    public var paidPeriods: Int = 0
    /// Successful automatic renewals since the last purchase (sandbox stops after 12).
    public var renewalCount: Int = 0

    /// A price increase announced for this subscription.
    public struct PriceIncrease: Codable, Hashable, Sendable {
        public var newPrice: Int64
        public var consentRequired: Bool
        public var accepted: Bool
    }

    /// An offer the coming renewals use.
    public struct PendingOffer: Codable, Hashable, Sendable {
        public var offer: Catalog.Offer
        public var remainingPeriods: Int
    }

    /// Whether the customer has service now: active or in Billing Grace Period.
    public var hasService: Bool { status == .active || status == .billingGracePeriod }

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
public struct NotificationRecord: Codable, Hashable, Sendable {
    public var notificationUUID: String
    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    /// The signed notification as sent (and re-sent on retries).
    public var signedPayload: String
    public var createdAt: Date
    public var bundleId: String
    /// The customer it concerns, for history look-ups by any of their transaction IDs.
    public var customerId: String?
    public var originalTransactionId: String?
    public var transactionId: String?
    public var sendAttempts: [SendAttempt] = []
    /// When the next delivery attempt is due; `nil` once delivered or given up.
    public var nextAttemptAt: Date?
    /// Requested with Request a Test Notification: its token.
    public var testNotificationToken: String?

    /// One delivery attempt.
    public struct SendAttempt: Codable, Hashable, Sendable {
        public var attemptDate: Date
        /// `SUCCESS`, `TIMED_OUT`, `UNSUCCESSFUL_HTTP_RESPONSE_CODE`, … (APPSTORE-SPEC §1.5).
        public var sendAttemptResult: String
    }

    /// Whether the last attempt failed (or none was made yet), for `onlyFailures`.
    public var isFailure: Bool { sendAttempts.last?.sendAttemptResult != "SUCCESS" }
}
