public import AppStoreModels
public import Foundation

/// Identifies a record within one environment: sandbox and production never mix (DESIGN rule 4).
public struct LedgerKey: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public var environment: AppStoreEnvironment
    public var id: String

    public init(_ environment: AppStoreEnvironment, _ id: String) {
        self.environment = environment
        self.id = id
    }

    public var description: String { "\(environment.rawValue)/\(id)" }

    public static func < (lhs: LedgerKey, rhs: LedgerKey) -> Bool {
        (lhs.environment.rawValue, lhs.id) < (rhs.environment.rawValue, rhs.id)
    }
}

/// An app account token within one app and environment. A token belongs to at most one customer there; the same
/// UUID in another app, or in the other environment, is another token with its own owner.
public struct AppAccountTokenKey: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public var bundleId: String
    public var environment: AppStoreEnvironment
    public var token: LowercaseUUID

    public init(bundleId: String, environment: AppStoreEnvironment, token: LowercaseUUID) {
        self.bundleId = bundleId
        self.environment = environment
        self.token = token
    }

    public var description: String { "\(bundleId)/\(environment.rawValue)/\(token)" }

    public static func < (lhs: AppAccountTokenKey, rhs: AppAccountTokenKey) -> Bool {
        (lhs.bundleId, lhs.environment.rawValue, lhs.token.description) < (rhs.bundleId, rhs.environment.rawValue, rhs.token.description)
    }
}

/// Why a submission from an app was refused: linking the transaction to the submitting customer would take a purchase,
/// or an app account token, from the customer who has it. Nothing is changed. The message names the token or the
/// purchase, never the other customer.
public struct OwnershipConflict: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is owned by someone else.
    public enum Kind: String, Sendable {
        /// The transaction's `appAccountToken` belongs to another customer of the app in that environment.
        case appAccountToken = "token-owned-by-another-customer"
        /// The purchase (its original transaction ID) already belongs to another customer.
        case purchase = "purchase-owned-by-another-customer"
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The stable code (the kind's raw value).
    public var code: String { kind.rawValue }
    public var description: String { "\(code): \(message)" }
}

/// A transaction as the ledger keeps it: the newest signed version seen, and where it came from.
public struct LedgerTransaction: Codable, Hashable, Sendable {
    public var info: TransactionInfo
    /// The `signedDate` of the version kept; an older version never replaces it (DESIGN rule 3).
    public var signedDate: Date
    /// What delivered this version: a notification UUID, `app` for a submission from the app, or
    /// ``Ledger/apiSource`` for the App Store Server API (reconciliation).
    public var source: String
    /// The raw JWS of the version kept.
    public var jws: String

    public init(info: TransactionInfo, signedDate: Date, source: String, jws: String) {
        self.info = info
        self.signedDate = signedDate
        self.source = source
        self.jws = jws
    }
}

/// An auto-renewable subscription: the newest status and renewal info seen, each versioned by its own signed date.
public struct LedgerSubscription: Codable, Hashable, Sendable {
    public var key: LedgerKey
    public var bundleId: String
    /// `data.status` of the newest notification about it (1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked).
    public var status: SubscriptionStatus?
    public var statusSignedDate: Date?
    public var statusNotificationUUID: String?
    public var renewalInfo: RenewalInfo?
    public var renewalSignedDate: Date?
    public var renewalJWS: String?

    public init(key: LedgerKey, bundleId: String) {
        self.key = key
        self.bundleId = bundleId
    }
}

/// A notification as received, kept for audit.
public struct LedgerNotification: Codable, Hashable, Sendable {
    public var notificationUUID: String
    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    /// What the ledger did with it: `applied`, `duplicate`, `recorded` (no purchase data).
    public var outcome: String
    public var signedPayload: String
}

/// Whose consumables, in which app and environment, of which product.
public struct ConsumableTotalKey: Codable, Hashable, Sendable {
    public var customerId: String
    public var environment: AppStoreEnvironment
    public var bundleId: String
    public var productId: String

    public init(customerId: String, environment: AppStoreEnvironment, bundleId: String, productId: String) {
        self.customerId = customerId
        self.environment = environment
        self.bundleId = bundleId
        self.productId = productId
    }
}

/// Consumable purchases counted without loading them.
public struct ConsumableTotal: Codable, Hashable, Sendable {
    /// Units bought and not refunded (each purchase's quantity, 1 when absent).
    public var units: Int
    /// Purchases counted, refunded ones included.
    public var purchases: Int

    public init(units: Int, purchases: Int) {
        self.units = units
        self.purchases = purchases
    }
}
