public import AppStoreModels
public import Foundation

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
