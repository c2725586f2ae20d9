package import AppStoreModels
package import Foundation
package import NIOCore

/// Which events a reader asks for.
package struct EventFilter: Hashable, Sendable {
    /// The apps whose events to read; `nil`: every app's.
    package var bundleIds: Set<String>?
    package var environment: AppStoreEnvironment?
    package var customerId: String?
    /// Only events that occurred at or after this date.
    package var since: Date?
    package var types: Set<EventType>?

    package init(
        bundleIds: Set<String>? = nil, environment: AppStoreEnvironment? = nil, customerId: String? = nil, since: Date? = nil,
        types: Set<EventType>? = nil
    ) {
        self.bundleIds = bundleIds
        self.environment = environment
        self.customerId = customerId
        self.since = since
        self.types = types
    }

    package func matches(_ event: LedgerEvent) -> Bool {
        (bundleIds?.contains(event.customer.bundleId) ?? true) && (environment.map { $0 == event.customer.environment } ?? true)
            && (customerId.map { $0 == event.customer.customerId } ?? true) && (since.map { event.draft.occurredAt >= $0 } ?? true)
            && (types?.contains(event.type) ?? true)
    }
}

extension LedgerEvent {
    /// The event as webhooks carry it and `GET /v1/events` lists it, the Standard Webhooks body: `type`, `timestamp`
    /// (RFC 3339, when the change happened) and `data` (the event's ID, app, environment, customer, sequence, cause,
    /// changes, and the customer's whole new state, as `GET /v1/customers/{id}` answers it). Keys sorted.
    package func json() -> ByteBuffer {
        var out = JSONWriter()
        out.object { out in
            out.key("data")
            out.object { out in
                out.field("bundleId", customer.bundleId)
                out.key("cause")
                out.raw(draft.causeJSON)
                out.key("changes")
                out.raw(draft.changesJSON)
                out.field("customerId", customer.customerId)
                out.field("environment", customer.environment.rawValue)
                out.field("id", id.description)
                out.field("occurredAt", draft.occurredAt)
                out.field("sequence", Int(draft.sequence))
                out.key("state")
                out.raw(draft.state)
            }
            out.field("timestamp", Self.timestamp(draft.occurredAt))
            out.field("type", type.rawValue)
        }
        return out.buffer
    }

    /// `json()` as text.
    package var jsonText: String { String(buffer: json()) }

    /// RFC 3339 in UTC with milliseconds, as Standard Webhooks' examples write it.
    package static func timestamp(_ date: Date) -> String {
        // From the whole milliseconds `occurredAt` carries: the formatter alone truncates the binary fraction, which
        // put most timestamps a millisecond before their `occurredAt`.
        let milliseconds = date.epochMilliseconds
        let fraction = ((milliseconds % 1_000) + 1_000) % 1_000
        let seconds = Date(timeIntervalSince1970: Double((milliseconds - fraction) / 1_000))
        let whole = seconds.formatted(Date.ISO8601FormatStyle())
        return whole.dropLast() + "." + String(repeating: "0", count: 3 - String(fraction).count) + String(fraction) + "Z"
    }

    /// Compact JSON of a stored part (`cause`, `changes`), keys sorted.
    package static func encode(_ value: some Encodable) -> String {
        (try? AppStoreJSON.makeEncoder().encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}

extension JSONWriter {
    /// Writes JSON already encoded (a stored state) as the next value.
    package mutating func raw(_ json: String) {
        rawValue(json)
    }

    /// Writes a JSON value, objects' keys sorted by their UTF-8 bytes (as `JSONEncoder` with `.sortedKeys`).
    mutating func value(_ value: JSONValue) {
        switch value {
        case .null: rawValue("null")
        case .bool(let flag): rawValue(flag ? "true" : "false")
        case .integer(let number): rawValue(String(number))
        case .number(let number): rawValue(number.isFinite ? "\(number)" : "null")
        case .string(let text): string(text)
        case .array(let elements): array(elements) { out, element in out.value(element) }
        case .object(let members):
            object { out in
                for (key, member) in members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
                    out.key(escaping: key)
                    out.value(member)
                }
            }
        }
    }
}

extension EventDraft {
    /// The stored JSON of `cause` and `changes`, written without `JSONEncoder` (a write's hot path).
    package var causeJSON: String {
        var out = JSONWriter(capacity: 128)
        out.object { out in
            out.field("id", cause.id)
            out.field("kind", cause.kind.rawValue)
            out.field("notificationType", cause.notificationType)
            out.field("subtype", cause.subtype)
            out.field("transferredFrom", cause.transferredFrom)
            out.field("transferredTo", cause.transferredTo)
        }
        return String(buffer: out.buffer)
    }

    package var changesJSON: String {
        var out = JSONWriter(capacity: 256)
        out.value(.object(changes))
        return String(buffer: out.buffer)
    }
}
