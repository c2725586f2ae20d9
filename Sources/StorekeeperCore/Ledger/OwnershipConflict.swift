/// Why a submission from an app was refused: linking the transaction to the submitting customer would take a purchase,
/// or an app account token, from the customer who has it. Nothing is changed. The message names the token or the
/// purchase, never the other customer.
package struct OwnershipConflict: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is owned by someone else.
    package enum Kind: String, Sendable {
        /// The transaction's `appAccountToken` belongs to another customer of the app in that environment.
        case appAccountToken = "token-owned-by-another-customer"
        /// The purchase (its original transaction ID) already belongs to another customer.
        case purchase = "purchase-owned-by-another-customer"
    }

    package var kind: Kind
    package var message: String

    package init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The stable code (the kind's raw value).
    package var code: String { kind.rawValue }
    package var description: String { "\(code): \(message)" }
}
