package import AppStoreModels
package import Foundation

/// What erasing a customer removed (`DELETE /v1/customers/{id}`): their identity in one app and environment — the
/// explicit links of that app's purchases to them, their app account tokens (owned and issued), their earlier events
/// and deliveries — while every transaction, subscription and notification stays for accounting. A later submission
/// of one of those purchases starts a new customer.
package struct CustomerErasure: Codable, Hashable, Sendable {
    package var customerId: String
    package var bundleId: String
    package var environment: String
    package var linksRemoved: Int
    package var tokensRemoved: Int
    package var eventsRemoved: Int
    /// The `customer.erased` event appended.
    package var eventId: String

    package init(
        customerId: String, bundleId: String, environment: String, linksRemoved: Int, tokensRemoved: Int, eventsRemoved: Int, eventId: String
    ) {
        self.customerId = customerId
        self.bundleId = bundleId
        self.environment = environment
        self.linksRemoved = linksRemoved
        self.tokensRemoved = tokensRemoved
        self.eventsRemoved = eventsRemoved
        self.eventId = eventId
    }

    /// The erasure event of `customer` after `stored` (their sequence goes on, so a consumer's order holds if the ID
    /// comes back), and the state recorded after it: a customer with nothing.
    package static func event(
        for customer: CustomerKey, after stored: CustomerStateRecord?, at now: Date, removed: [String: JSONValue]
    ) -> (EventDraft, CustomerStateRecord) {
        let empty = CustomerAnswer(
            state: CustomerState(
                customerId: customer.customerId, environment: customer.environment, entitlements: [], entitledProductIds: [], consumableBalance: [:]),
            ledger: Ledger(), bundleId: customer.bundleId, validUntil: nil
        ).jsonText
        let sequence = (stored?.sequence ?? 0) + 1
        let draft = EventDraft(
            customer: customer, sequence: sequence, type: .customerErased, occurredAt: now, cause: EventCause(.api, id: "erase"), changes: removed,
            state: empty)
        return (draft, CustomerStateRecord(customer: customer, sequence: sequence, state: CustomerStateRecord.digest(of: empty), validUntil: nil))
    }
}
