package import AppStoreModels
package import Foundation

/// One action taken through the support API, as the audit log keeps it: who (the API key's name), when, on which
/// customer and purchase, what was asked, and what came of it (Apple's answer or refusal). Appended, never changed:
/// no route or command edits or deletes a record (erasing a customer keeps them, as it keeps their purchases).
package struct SupportAction: Sendable, Hashable, Encodable {
    /// Its place in the log (0 before it is recorded).
    package var id: Int64
    package var at: Date
    /// The name of the API key that acted (never the key).
    package var keyName: String
    package var customer: CustomerKey
    /// What was done: ``Kind``'s raw value.
    package var action: String
    /// The purchase acted on (an original transaction ID), when there is one.
    package var target: String?
    /// What was asked (days, reason, note).
    package var request: [String: JSONValue]
    /// `done`, `refused` (by Storekeeper's checks or by the App Store) or `failed` (the App Store could not be reached).
    package var outcome: String
    /// What came of it: the App Store's answer, or why it was refused or failed.
    package var detail: [String: JSONValue]

    package enum Kind: String, Sendable {
        case extendRenewalDate = "extend-renewal-date"
        /// Extend Subscription Renewal Dates for All Active Subscribers of a product (app-wide: the customer is
        /// ``appWide``, the target the product).
        case massExtendRenewalDate = "mass-extend-renewal-date"
        /// An admin erased the customer's identity (`DELETE /v1/customers/{id}`): the actions before it are the
        /// erased identity's.
        case eraseCustomer = "erase-customer"
        /// Send Consumption Information for a `CONSUMPTION_REQUEST`, by the consumption policy (key name
        /// `consumption-policy`) or by a person; the outcome is the request's state (`sent`, `late`, `failed`, …).
        case consumptionInformation = "consumption-information"
        /// A promotional entitlement granted (target: the grant's ID).
        case grantPromotional = "grant-promotional-entitlement"
        /// A promotional entitlement revoked (target: the grant's ID).
        case revokePromotional = "revoke-promotional-entitlement"
        /// A subscription offer signed for the customer, or refused by the offer policy (target: the offer's ID; the
        /// detail keeps the V1 nonce, which is never issued twice).
        case signOffer = "sign-offer"
        /// An introductory-offer eligibility signed for the customer (target: the product).
        case signIntroductoryEligibility = "sign-introductory-offer-eligibility"
    }

    /// This record as a grant change came out: as given when done; `refused`, with the refusal's code, otherwise.
    package func recording(_ outcome: PromotionalGrantOutcome) -> SupportAction {
        guard case .refused(let refusal, _) = outcome else { return self }
        var refused = self
        refused.outcome = "refused"
        refused.detail["refused"] = .string(refusal.code)
        return refused
    }

    /// The customer ID of an action on a whole app (no customer ID has `*`: they are letters, digits and `-_.@:`).
    package static let appWide = "*"

    package init(
        id: Int64 = 0, at: Date, keyName: String, customer: CustomerKey, action: String, target: String?, request: [String: JSONValue],
        outcome: String, detail: [String: JSONValue]
    ) {
        self.id = id
        self.at = at
        self.keyName = keyName
        self.customer = customer
        self.action = action
        self.target = target
        self.request = request
        self.outcome = outcome
        self.detail = detail
    }

    private enum CodingKeys: String, CodingKey {
        case id, at, keyName, bundleId, environment, customerId, action, target, request, outcome, detail
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(at, forKey: .at)
        try container.encode(keyName, forKey: .keyName)
        try container.encode(customer.bundleId, forKey: .bundleId)
        try container.encode(customer.environment, forKey: .environment)
        try container.encode(customer.customerId, forKey: .customerId)
        try container.encode(action, forKey: .action)
        try container.encodeIfPresent(target, forKey: .target)
        try container.encode(request, forKey: .request)
        try container.encode(outcome, forKey: .outcome)
        try container.encode(detail, forKey: .detail)
    }

    /// `request` and `detail` as the ledger stores them (JSON text, keys sorted).
    package static func text(_ object: [String: JSONValue]) -> String {
        String(decoding: (try? AppStoreJSON.makeEncoder().encode(object)) ?? Data("{}".utf8), as: UTF8.self)
    }

    /// A stored object read back (an unreadable one, which only a hand-edited ledger holds, as empty).
    package static func object(_ text: String) -> [String: JSONValue] {
        (try? AppStoreJSON.makeDecoder().decode([String: JSONValue].self, from: Data(text.utf8))) ?? [:]
    }
}

/// What came of appending an action only if none like it was done since a time
/// (`LedgerStore.recordSupportAction(_:unlessDoneSince:)`).
package enum SupportActionClaim: Sendable, Equatable {
    /// Appended, with this ID.
    case recorded(Int64)
    /// Not appended: one like it was done at this time.
    case alreadyDone(at: Date)
}
