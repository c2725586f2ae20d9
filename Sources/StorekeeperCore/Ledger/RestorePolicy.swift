import AppStoreModels

/// What happens when a customer submits a purchase that belongs to another customer (a restore under another account,
/// a shared device): the server's `restorePolicy` setting.
package enum RestorePolicy: String, Codable, Sendable, CaseIterable {
    /// The purchase stays its owner's; the submission is refused with 409 and changes nothing.
    case keep
    /// The purchase, and its future renewals, move to the submitting customer; the previous owner loses its
    /// entitlement at once. Both get an event (`customer.transferred_out`, `customer.transferred_in`).
    case transfer
}

extension RestorePolicy {
    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let policy = RestorePolicy(rawValue: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "must be \"keep\" or \"transfer\", not \(UntrustedText.quoted(text, limit: 32))")
        }
        self = policy
    }
}
