public import AppStoreModels
public import AppStoreSigning
public import Foundation

/// Why storage failed. The webhook answers 5xx for it, so Apple retries.
public struct StorageError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var underlying: (any Error & Sendable)?

    public init(_ message: String, underlying: (any Error & Sendable)? = nil) {
        self.message = message
        self.underlying = underlying
    }

    public var description: String { "storage: \(message)" }
}

/// What applying a notification did.
public enum ApplyOutcome: String, Codable, Sendable {
    /// Its purchase data changed the ledger (or confirmed it).
    case applied
    /// Seen before (same `notificationUUID`): acknowledged, nothing changed.
    case duplicate
    /// Kept for audit; it carried no purchase data (e.g. `TEST`, an unknown type, a summary).
    case recorded
}

/// Where the ledger lives, shaped by the domain (not a SQL facade): SQLite embedded by default, PostgreSQL to scale
/// out. Every method is one atomic unit: it commits completely or not at all.
public protocol LedgerStore: Sendable {
    /// Where the store announces, after each commit, the customers a write may have changed (for read caches).
    var changes: LedgerChangeFeed { get }

    /// Applies a verified notification and everything it carries in one transaction, under the ``Ledger`` rules
    /// (once per `notificationUUID`; newest signed version wins).
    func apply(_ notification: VerifiedNotification) async throws(StorageError) -> ApplyOutcome

    /// Keeps a notification that was refused (unverifiable or malformed), for audit.
    func recordRejected(signedPayload: String, reason: String, at date: Date) async throws(StorageError)

    /// Applies a transaction the app submitted and links it (and its subscription) to the customer.
    func submit(_ transaction: VerifiedSignedData<TransactionInfo>, customerId: String) async throws(StorageError)

    /// Whether the customer exists: they submitted a transaction or own an app account token.
    func customerExists(_ customerId: String) async throws(StorageError) -> Bool

    /// The part of the ledger that concerns one customer: their transactions, subscriptions, links and tokens.
    func ledger(for customerId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger

    /// What decides the customer's entitlements and their customer view, for fast reads: like
    /// ``ledger(for:environment:)`` but with only the latest transaction (by purchase date) of each auto-renewable
    /// subscription, which is all the ``EntitlementEngine`` and the customer view use, and the app account tokens of
    /// the transactions left out (``Ledger/omittedTransactionTokens``), which attribution still consults; consumables
    /// may be counted (``Ledger/consumableTotals``) instead of held. The engine's state and next change are the same
    /// from either ledger.
    func entitlementLedger(for customerId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger

    /// How many notifications are kept, by outcome (for audit and tests).
    func notificationCounts() async throws(StorageError) -> [String: Int]

    /// Throws when the database cannot be reached.
    func checkHealth() async throws(StorageError)
}

extension LedgerStore {
    /// By default, the whole customer ledger (always correct, never faster).
    public func entitlementLedger(for customerId: String, environment: AppStoreEnvironment) async throws(StorageError) -> Ledger {
        try await ledger(for: customerId, environment: environment)
    }
}
