package import AppStoreModels
package import Foundation
import NIOCore

/// What erasing a customer removed (`DELETE /v1/customers/{id}`): their identity in one app and environment — the
/// explicit links of that app's purchases to them, their app account tokens (owned and issued), their earlier events
/// and deliveries — while every transaction, subscription and notification stays for accounting. Their tokens are
/// retired (`erased_tokens`), never taken again: a later submission of one of those purchases starts a new customer
/// with that purchase alone.
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

    /// The fields of another customer's event that name a customer (a transfer's `to` and `from`, its cause's
    /// `transferredFrom` and `transferredTo`): an erased customer's ID is removed from them.
    static let namingFields: Set<String> = ["to", "from", "transferredFrom", "transferredTo"]

    /// What another customer's event must hold instead of `changes` and `cause` (their JSON) once `erased` is erased:
    /// both with every field naming `erased` left out; `nil` when neither names them.
    package static func scrubbing(changes: String, cause: String, of erased: String) -> (changes: String, cause: String)? {
        func scrubbed(_ json: String) -> String? {
            guard case .object(var members)? = try? JSONDecoder().decode(JSONValue.self, from: Data(json.utf8)) else { return nil }
            let named = members.filter { namingFields.contains($0.key) && $0.value == .string(erased) }
            guard !named.isEmpty else { return nil }
            for key in named.keys { members[key] = nil }
            var out = JSONWriter(capacity: json.utf8.count)
            out.value(.object(members))
            return String(buffer: out.buffer)
        }
        let newChanges = scrubbed(changes)
        let newCause = scrubbed(cause)
        guard newChanges != nil || newCause != nil else { return nil }
        return (newChanges ?? changes, newCause ?? cause)
    }

    /// How an ID appears in an event's JSON (a string value, escaped as the outbox writes it): what a search of the
    /// stored JSON looks for before ``scrubbing(changes:cause:of:)`` reads it.
    package static func quoted(_ customerId: String) -> String {
        var out = JSONWriter(capacity: customerId.utf8.count + 8)
        out.string(customerId)
        return String(buffer: out.buffer)
    }
}
