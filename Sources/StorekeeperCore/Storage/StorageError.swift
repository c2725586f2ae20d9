import AppStoreModels
import AppStoreSigning
import Foundation

/// Why storage failed. The webhook answers 5xx for it, so Apple retries.
package struct StorageError: Error, Sendable, CustomStringConvertible {
    package var message: String
    package var underlying: (any Error & Sendable)?

    package init(_ message: String, underlying: (any Error & Sendable)? = nil) {
        self.message = message
        self.underlying = underlying
    }

    package var description: String { "storage: \(message)" }
}
