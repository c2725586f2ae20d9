public import AppStoreModels
public import AppStoreSigning
import Foundation
public import Logging

/// Why a submitted transaction was not taken.
public struct SubmissionRejection: Error, Sendable {
    public enum Kind: Sendable, Equatable {
        /// Not a verifiable transaction (400).
        case malformed
        /// Another app's, or an app or environment the server does not serve (403).
        case forbidden
    }

    public var kind: Kind
    public var code: String
    public var message: String

    public init(_ kind: Kind, code: String, message: String) {
        self.kind = kind
        self.code = code
        self.message = message
    }
}
