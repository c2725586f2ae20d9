import AppStoreModels
import AppStoreSigning
import Foundation

/// What applying a notification did.
package enum ApplyOutcome: String, Codable, Sendable {
    /// Its purchase data changed the ledger (or confirmed it).
    case applied
    /// Seen before (same `notificationUUID`): acknowledged, nothing changed.
    case duplicate
    /// Kept for audit; it carried no purchase data (e.g. `TEST`, an unknown type, a summary).
    case recorded
}
