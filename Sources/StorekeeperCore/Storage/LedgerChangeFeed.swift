import Synchronization

/// What a committed write may have changed, for read caches.
package enum LedgerChange: Sendable, Hashable {
    /// These customers.
    case customers(Set<String>)
    /// Anyone: writes may have been missed (e.g. while the channel that announces other processes' writes was down).
    case everyone
}

/// Tells listeners which customers a committed write may have changed, so that read caches can drop them.
///
/// A store publishes after its write transaction commits, never before. SQLite's store announces its own writes,
/// which are all the writes (`storekeeper serve` is the file's only writer). PostgreSQL's also announces the other
/// instances' writes, received through `LISTEN`; while that channel is down the feed is not ``isComplete`` and
/// readers must not cache.
package final class LedgerChangeFeed: Sendable {
    private let listeners = Mutex<[@Sendable (LedgerChange) -> Void]>([])
    private let complete = Atomic<Bool>(true)

    package init() {}

    /// Calls `listener` after every committed write that may have changed some customers.
    package func subscribe(_ listener: @escaping @Sendable (LedgerChange) -> Void) {
        listeners.withLock { $0.append(listener) }
    }

    /// Whether every write that can change the ledger is announced here (a cache must not keep values otherwise).
    package var isComplete: Bool { complete.load(ordering: .acquiring) }

    /// Says whether the feed hears every write; either way everything cached so far is dropped (writes may have
    /// gone unannounced before, or while it was not complete).
    package func setComplete(_ value: Bool) {
        complete.store(value, ordering: .releasing)
        announce(.everyone)
    }

    /// Called by stores after a commit.
    package func publish(_ customers: Set<String>) {
        guard !customers.isEmpty else { return }
        announce(.customers(customers))
    }

    /// Called when what changed is not known.
    package func publishEveryone() {
        announce(.everyone)
    }

    private func announce(_ change: LedgerChange) {
        for listener in listeners.withLock({ $0 }) { listener(change) }
    }
}
