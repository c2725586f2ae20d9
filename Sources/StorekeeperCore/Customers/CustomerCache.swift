package import Foundation
import Synchronization

/// A bounded cache of values computed per customer (e.g. the encoded answer to `GET /v1/customers/{id}`), each
/// valid until a given moment, dropped when a write changes the customer.
///
/// A value computed from a read that raced with a write must not outlive the write. Readers therefore take a
/// ``ticket()`` before reading the ledger and hand it back with the value: every invalidation advances a
/// generation and stamps the customer with it, and a value is only stored when no invalidation of its customer
/// came after its ticket. Evicting a customer's stamp raises a floor that tickets must reach, so eviction never
/// lets a stale value in either.
package final class CustomerCache<Value: Sendable>: Sendable {
    /// A ticket for one read: the generation when it began.
    package struct Ticket: Sendable {
        fileprivate let generation: UInt64
    }

    private struct Entry {
        var value: Value
        var validUntil: Date
    }

    private struct Slot {
        /// The generation of the last invalidation of this customer (0: none remembered).
        var invalidatedAt: UInt64 = 0
        /// Values by variant (e.g. app and environment).
        var entries: [String: Entry] = [:]
    }

    private struct State {
        var generation: UInt64 = 0
        /// Tickets older than this are refused (an evicted slot's stamp could have been newer).
        var floor: UInt64 = 0
        var slots: [String: Slot] = [:]
        var hits = 0
        var misses = 0
    }

    private let state = Mutex(State())
    /// How many customers (with values or recent invalidations) are remembered; 0 disables the cache.
    package let capacity: Int
    /// The longest a value is served, whatever its own validity (a bound on any staleness the cache cannot see).
    package let maxAge: TimeInterval

    package init(capacity: Int, maxAge: TimeInterval) {
        self.capacity = max(0, capacity)
        self.maxAge = maxAge
    }

    /// The value cached for a customer and variant, if still valid at `now`.
    package func value(customer: String, variant: String, now: Date) -> Value? {
        guard capacity > 0 else { return nil }
        return state.withLock { state in
            if let entry = state.slots[customer]?.entries[variant], entry.validUntil > now {
                state.hits += 1
                return entry.value
            }
            state.misses += 1
            return nil
        }
    }

    /// Take before reading what the value is computed from.
    package func ticket() -> Ticket {
        Ticket(generation: state.withLock { $0.generation })
    }

    /// Keeps `value` until `validUntil` (at most ``maxAge`` after `now`), unless the customer was invalidated after
    /// `ticket` was taken. Returns whether it was kept.
    @discardableResult
    package func store(_ value: Value, customer: String, variant: String, validUntil: Date?, now: Date, ticket: Ticket) -> Bool {
        guard capacity > 0 else { return false }
        let until = min(validUntil ?? .distantFuture, now.addingTimeInterval(maxAge))
        guard until > now else { return false }
        return state.withLock { state in
            guard ticket.generation >= state.floor, ticket.generation >= state.slots[customer]?.invalidatedAt ?? 0 else { return false }
            if state.slots[customer] == nil { Self.makeRoom(&state, capacity: capacity) }
            state.slots[customer, default: Slot()].entries[variant] = Entry(value: value, validUntil: until)
            return true
        }
    }

    /// Drops the customers' values; reads that began before this call cannot store theirs afterwards.
    package func invalidate(_ customers: Set<String>) {
        guard capacity > 0, !customers.isEmpty else { return }
        state.withLock { state in
            state.generation += 1
            for customer in customers {
                if state.slots[customer] == nil { Self.makeRoom(&state, capacity: capacity) }
                state.slots[customer] = Slot(invalidatedAt: state.generation)
            }
        }
    }

    /// Drops every value; reads that began before this call cannot store theirs afterwards.
    package func invalidateAll() {
        guard capacity > 0 else { return }
        state.withLock { state in
            state.generation += 1
            state.floor = state.generation
            state.slots.removeAll()
        }
    }

    /// Hits and misses since start, and how many customers are remembered.
    package var statistics: (hits: Int, misses: Int, customers: Int) {
        state.withLock { ($0.hits, $0.misses, $0.slots.count) }
    }

    /// Evicts an eighth of the slots (in no particular order) when full, raising the floor past their stamps.
    private static func makeRoom(_ state: inout State, capacity: Int) {
        guard state.slots.count >= capacity else { return }
        let victims = Array(state.slots.keys.prefix(max(1, capacity / 8)))
        for victim in victims {
            if let slot = state.slots.removeValue(forKey: victim) {
                state.floor = max(state.floor, slot.invalidatedAt)
            }
        }
    }
}
