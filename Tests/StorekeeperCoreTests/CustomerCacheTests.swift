import Foundation
import StorekeeperCore
import StorekeeperTesting
import Synchronization
import Testing

@Suite("Customer cache")
struct CustomerCacheTests {
    let now = Date(timeIntervalSince1970: 1_780_000_000)

    @Test("a value is served until its validity or the maximum age, whichever comes first")
    func validity() {
        let cache = CustomerCache<String>(capacity: 10, maxAge: 60)
        #expect(cache.store("a", customer: "c", variant: "x", validUntil: now.addingTimeInterval(30), now: now, ticket: cache.ticket()))
        #expect(cache.value(customer: "c", variant: "x", now: now.addingTimeInterval(29)) == "a")
        #expect(cache.value(customer: "c", variant: "x", now: now.addingTimeInterval(30)) == nil)
        #expect(cache.value(customer: "c", variant: "y", now: now) == nil)
        cache.put("b", "d", cache.ticket())
        #expect(cache.value(customer: "d", variant: "x", now: now.addingTimeInterval(59)) == "b")
        #expect(cache.value(customer: "d", variant: "x", now: now.addingTimeInterval(61)) == nil)
        #expect(!cache.store("late", customer: "e", variant: "x", validUntil: now, now: now, ticket: cache.ticket()))
        #expect(cache.statistics.hits == 2 && cache.statistics.misses == 3)
    }

    @Test("an invalidation drops every variant of the customer, and only that customer")
    func invalidation() {
        let cache = CustomerCache<String>(capacity: 10, maxAge: 60)
        for (customer, variant) in [("c", "x"), ("c", "y"), ("d", "x")] {
            cache.store(customer + variant, customer: customer, variant: variant, validUntil: nil, now: now, ticket: cache.ticket())
        }
        cache.invalidate(["c"])
        #expect(cache.value(customer: "c", variant: "x", now: now) == nil)
        #expect(cache.value(customer: "c", variant: "y", now: now) == nil)
        #expect(cache.value(customer: "d", variant: "x", now: now) == "dx")
    }

    /// A cache, and a ticket taken just before customer `c` was invalidated.
    static func ticketBeforeInvalidation(capacity: Int) -> (CustomerCache<String>, CustomerCache<String>.Ticket) {
        let cache = CustomerCache<String>(capacity: capacity, maxAge: 60)
        let early = cache.ticket()
        cache.invalidate(["c"])
        return (cache, early)
    }

    @Test("a read that began before a write's invalidation cannot store what it computed")
    func race() {
        let (cache, early) = Self.ticketBeforeInvalidation(capacity: 10)
        #expect(!cache.put("stale", "c", early))
        #expect(cache.value(customer: "c", variant: "x", now: now) == nil)
        // Another customer's invalidation does not hold back this one's read.
        #expect(cache.put("fresh", "d", early))
        let late = cache.ticket()
        #expect(cache.put("fresh", "c", late))
        #expect(cache.value(customer: "c", variant: "x", now: now) == "fresh")
    }

    @Test("evicting a customer's invalidation stamp still refuses reads that began before it")
    func eviction() {
        let (cache, early) = Self.ticketBeforeInvalidation(capacity: 8)
        for index in 0..<40 {
            cache.put("v", "filler-\(index)", cache.ticket())
        }
        #expect(cache.statistics.customers <= 8)
        #expect(!cache.put("stale", "c", early))
        #expect(cache.put("fresh", "c", cache.ticket()))
    }

    @Test("capacity 0 turns the cache off")
    func off() {
        let cache = CustomerCache<String>(capacity: 0, maxAge: 60)
        #expect(!cache.put("a", "c", cache.ticket()))
        #expect(cache.value(customer: "c", variant: "x", now: now) == nil)
        cache.invalidate(["c"])
        #expect(cache.statistics.customers == 0)
    }

    @Test("concurrent readers and writers: no value stored from a read that overlapped an invalidation")
    func concurrency() async {
        let cache = CustomerCache<Int>(capacity: 64, maxAge: 60)
        let versions = VersionBoard()
        let now = self.now
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for _ in 0..<2_000 {
                    let customer = "c\(Int.random(in: 0..<16))"
                    versions.bump(customer)
                    cache.invalidate([customer])
                    await Task.yield()
                }
            }
            for _ in 0..<3 {
                group.addTask {
                    for _ in 0..<4_000 {
                        let customer = "c\(Int.random(in: 0..<16))"
                        let floor = versions.invalidated(customer)
                        if let cached = cache.value(customer: customer, variant: "x", now: now) {
                            // A cached value may only lag a write that has not invalidated yet.
                            #expect(cached >= floor)
                            continue
                        }
                        let ticket = cache.ticket()
                        let version = versions.current(customer)
                        await Task.yield()  // let writes land between the read and the store
                        cache.put(version, customer, ticket)
                    }
                }
            }
        }
    }
}

extension CustomerCache {
    /// Stores a value without an expiry of its own, variant `x`, at the tests' fixed moment.
    @discardableResult
    func put(_ value: Value, _ customer: String, _ ticket: Ticket) -> Bool {
        store(value, customer: customer, variant: "x", validUntil: nil, now: Date(timeIntervalSince1970: 1_780_000_000), ticket: ticket)
    }
}

/// Per customer: the version a write has committed, and the version whose invalidation has completed.
final class VersionBoard: Sendable {
    private let state = Mutex<(committed: [String: Int], invalidated: [String: Int])>(([:], [:]))

    /// Commits a new version (the caller invalidates afterwards, like a store after its commit).
    func bump(_ customer: String) {
        state.withLock { $0.committed[customer, default: 0] += 1 }
    }

    func current(_ customer: String) -> Int { state.withLock { $0.committed[customer] ?? 0 } }

    /// The newest version whose invalidation has certainly happened: committed minus any in flight. Writers here
    /// bump then invalidate in one task, so everything but the latest bump is invalidated.
    func invalidated(_ customer: String) -> Int { max(0, current(customer) - 1) }
}
