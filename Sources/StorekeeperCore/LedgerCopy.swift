public import AppStoreModels
public import Foundation

/// A ledger's contents in pages, for moving it to another backend (`storekeeper copy`, SQLite to PostgreSQL). Each
/// page is whole records; a notification keeps when it was received, and its raw payload when not pruned.
public struct LedgerPage: Sendable {
    public var transactions: [LedgerTransaction] = []
    public var subscriptions: [LedgerSubscription] = []
    public var links: [LedgerKey: String] = [:]
    public var tokenOwners: [AppAccountTokenKey: String] = [:]
    public var notifications: [KeptNotification] = []
    public var refused: [RefusedNotification] = []
    public var watermarks: [RecoveryWatermark] = []

    public init() {}

    /// Records in the page.
    public var count: Int {
        transactions.count + subscriptions.count + links.count + tokenOwners.count + notifications.count + refused.count + watermarks.count
    }
}

/// A notification as the ledger keeps it, with when it was received; `signedPayload` is `nil` once pruned.
public struct KeptNotification: Sendable, Hashable {
    public var notificationUUID: String
    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    public var outcome: String
    public var receivedAt: Date
    public var signedPayload: String?

    public init(
        notificationUUID: String, notificationType: NotificationType, subtype: NotificationSubtype?, signedDate: Date?,
        environment: AppStoreEnvironment?, outcome: String, receivedAt: Date, signedPayload: String?
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDate = signedDate
        self.environment = environment
        self.outcome = outcome
        self.receivedAt = receivedAt
        self.signedPayload = signedPayload
    }
}

/// A customer of one app in one environment, as a read names them.
public struct CustomerScope: Sendable, Hashable, Comparable {
    public var customerId: String
    public var bundleId: String
    public var environment: AppStoreEnvironment

    public init(customerId: String, bundleId: String, environment: AppStoreEnvironment) {
        self.customerId = customerId
        self.bundleId = bundleId
        self.environment = environment
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.customerId, lhs.bundleId, lhs.environment.rawValue) < (rhs.customerId, rhs.bundleId, rhs.environment.rawValue)
    }
}

/// A backend whose whole ledger can be read out in pages.
public protocol LedgerExporting: LedgerStore {
    /// Calls `body` with each page of at most about `pageSize` records, every record once.
    func exportPages(pageSize: Int, _ body: (LedgerPage) async throws -> Void) async throws
    /// Every customer known to some app in some environment (through a link or a token).
    func customers() async throws(StorageError) -> [CustomerScope]
}

/// A backend a ledger can be copied into.
public protocol LedgerImporting: LedgerStore {
    /// Whether the ledger holds nothing (a copy goes into an empty ledger only).
    func isEmpty() async throws(StorageError) -> Bool
    /// Writes a page's records as they are, in one transaction.
    func importPage(_ page: LedgerPage) async throws(StorageError)
}

/// Copies one ledger into another, empty one, and then checks that every customer's ledger reads the same from both.
public enum LedgerCopy {
    public struct Report: Codable, Sendable {
        public var records = 0
        public var pages = 0
        public var customersCompared = 0
        /// Customers whose ledger reads differently from the two (none after a good copy).
        public var customersDiffering: [String] = []
    }

    public static func copy(
        from source: some LedgerExporting, to target: some LedgerImporting, pageSize: Int = 500,
        progress: (@Sendable (Int) -> Void)? = nil
    ) async throws -> Report {
        guard try await target.isEmpty() else {
            throw StorageError("the target ledger is not empty: a copy goes into a new, empty database")
        }
        var report = Report()
        try await source.exportPages(pageSize: pageSize) { page in
            try await target.importPage(page)
            report.records += page.count
            report.pages += 1
            progress?(report.records)
        }
        for customer in try await source.customers() {
            let before = try await source.ledger(for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
            let after = try await target.ledger(for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
            report.customersCompared += 1
            if before != after { report.customersDiffering.append("\(customer.customerId) (\(customer.bundleId) \(customer.environment.rawValue))") }
        }
        return report
    }
}
