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
