package import AppStoreModels
import Crypto
package import Foundation

/// One customer of one app in one environment: the subject of events, with its own sequence.
package struct CustomerKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    package var bundleId: String
    package var environment: AppStoreEnvironment
    package var customerId: String

    package init(bundleId: String, environment: AppStoreEnvironment, customerId: String) {
        self.bundleId = bundleId
        self.environment = environment
        self.customerId = customerId
    }

    package var description: String { "\(bundleId) \(environment.rawValue) \(customerId)" }

    package static func < (lhs: CustomerKey, rhs: CustomerKey) -> Bool {
        (lhs.bundleId, lhs.environment.rawValue, lhs.customerId) < (rhs.bundleId, rhs.environment.rawValue, rhs.customerId)
    }
}

/// What made an event happen.
package struct EventCause: Codable, Hashable, Sendable {
    package enum Kind: String, Codable, Hashable, Sendable {
        /// An App Store Server Notification (`id`: its `notificationUUID`).
        case notification
        /// A transaction the app submitted (`id`: its transaction ID).
        case submission
        /// Data pulled from the App Store Server API by reconciliation (`id`: nil).
        case reconciliation
        /// Time passed: an expiry with no notification (`id`: nil).
        case expiry
        /// A call to Storekeeper's API (`id`: what it acted on).
        case api
    }

    package var kind: Kind
    package var id: String?
    /// For a notification: its type and subtype (`DID_RENEW`, `BILLING_RECOVERY`).
    package var notificationType: String?
    package var subtype: String?
    /// For a purchase moved by the `transfer` restore policy: its previous owner and its new one.
    package var transferredFrom: String?
    package var transferredTo: String?

    package init(
        _ kind: Kind, id: String? = nil, notificationType: String? = nil, subtype: String? = nil, transferredFrom: String? = nil,
        transferredTo: String? = nil
    ) {
        self.kind = kind
        self.id = id
        self.notificationType = notificationType
        self.subtype = subtype
        self.transferredFrom = transferredFrom
        self.transferredTo = transferredTo
    }

    /// The cause of applying a notification.
    package static func notification(_ payload: NotificationPayload) -> EventCause {
        EventCause(
            .notification, id: payload.notificationUUID, notificationType: payload.notificationType.rawValue, subtype: payload.subtype?.rawValue)
    }
}

/// An event before the ledger stores it: the store gives it its ID and its position.
package struct EventDraft: Hashable, Sendable {
    package var customer: CustomerKey
    /// The customer's sequence number: 1 for their first event, then one more for each, without gaps.
    package var sequence: Int64
    package var type: EventType
    package var occurredAt: Date
    package var cause: EventCause
    /// What changed (the subject's `originalTransactionId` and `productId`, and what the type needs: a reason, a
    /// direction, the previous value).
    package var changes: [String: JSONValue]
    /// The customer's whole state after the change: exactly the JSON `GET /v1/customers/{id}` answered then.
    package var state: String

    package init(
        customer: CustomerKey, sequence: Int64, type: EventType, occurredAt: Date, cause: EventCause, changes: [String: JSONValue], state: String
    ) {
        self.customer = customer
        self.sequence = sequence
        self.type = type
        self.occurredAt = occurredAt
        self.cause = cause
        self.changes = changes
        self.state = state
    }
}

/// An event as the ledger keeps it.
package struct LedgerEvent: Hashable, Sendable {
    /// Its place in the ledger's commit order: a consumer that has read up to a position has seen every event
    /// committed before it (the polling cursor).
    package var position: Int64
    package var id: EventID
    package var draft: EventDraft

    package init(position: Int64, id: EventID, draft: EventDraft) {
        self.position = position
        self.id = id
        self.draft = draft
    }

    /// An event from its stored columns (both backends store the same ones); `nil` for an ID or a type this version
    /// does not know.
    package init?(
        position: Int64, id: String, bundleId: String, environment: String, customerId: String, sequence: Int64, type: String,
        occurredAt: Int64, cause: String, changes: String, state: String
    ) {
        guard let id = EventID(id), let type = EventType(rawValue: type) else { return nil }
        let decoder = AppStoreJSON.makeDecoder()
        self.init(
            position: position, id: id,
            draft: EventDraft(
                customer: CustomerKey(bundleId: bundleId, environment: AppStoreEnvironment(rawValue: environment), customerId: customerId),
                sequence: sequence, type: type, occurredAt: Date(epochMilliseconds: occurredAt),
                cause: (try? decoder.decode(EventCause.self, from: Data(cause.utf8))) ?? EventCause(.api),
                changes: (try? decoder.decode([String: JSONValue].self, from: Data(changes.utf8))) ?? [:], state: state))
    }

    package var customer: CustomerKey { draft.customer }
    package var type: EventType { draft.type }
}

/// The last state the outbox recorded for a customer: what the next event's changes are judged against.
package struct CustomerStateRecord: Hashable, Sendable {
    package var customer: CustomerKey
    /// The sequence number of their last event (0 before the first).
    package var sequence: Int64
    /// What identifies their answer after that event (or when it was first recorded): ``digest(of:)`` of its JSON
    /// (the event itself holds the JSON), or, in a ledger written before digests, the JSON itself.
    package var state: String
    /// When that state changes by itself (an expiry): the expiry job looks at the customer then.
    package var validUntil: Date?

    package init(customer: CustomerKey, sequence: Int64, state: String, validUntil: Date?) {
        self.customer = customer
        self.sequence = sequence
        self.state = state
        self.validUntil = validUntil
    }

    /// The recorded form of a state's JSON: `sha256:` and the first 128 bits of its SHA-256, in hex. Storing the
    /// JSON once (in the event) instead of twice halves what the outbox appends per change.
    package static func digest(of json: String) -> String {
        var json = json
        let hash = json.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        return String(unsafeUninitializedCapacity: 39) { text in
            let hex = Array("0123456789abcdef".utf8)
            var count = 0
            for byte in "sha256:".utf8 {
                text[count] = byte
                count += 1
            }
            for byte in hash.prefix(16) {
                text[count] = hex[Int(byte >> 4)]
                text[count + 1] = hex[Int(byte & 0x0F)]
                count += 2
            }
            return count
        }
    }

    /// Whether the recorded state is the state whose JSON is `json`.
    package func records(_ json: String) -> Bool {
        state.hasPrefix("{") ? state == json : state == Self.digest(of: json)
    }

    /// The recorded answer itself when the record holds its JSON (a ledger written before digests); `nil` when it
    /// holds a digest.
    var recordedJSON: String? { state.hasPrefix("{") ? state : nil }
}
