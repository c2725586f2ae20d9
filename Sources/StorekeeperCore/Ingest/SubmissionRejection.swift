import AppStoreModels
import AppStoreSigning
import Foundation
import Logging

/// Why a submitted transaction was not taken.
package struct SubmissionRejection: Error, Sendable {
    package enum Kind: Sendable, Equatable {
        /// Not a verifiable transaction (400).
        case malformed
        /// Another app's, or an app or environment the server does not serve (403).
        case forbidden
    }

    package var kind: Kind
    package var code: String
    package var message: String

    package init(_ kind: Kind, code: String, message: String) {
        self.kind = kind
        self.code = code
        self.message = message
    }
}
