import AppStoreModels
import AppStoreSigning
import Foundation

/// What a submission from the app did.
package enum SubmissionOutcome: Hashable, Sendable {
    /// The transaction is applied and linked to the customer (or already was).
    case linked
    /// Nothing changed: the token or the purchase belongs to another customer.
    case refused(OwnershipConflict)
}
