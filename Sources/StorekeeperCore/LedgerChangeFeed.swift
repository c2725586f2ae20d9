import Synchronization

/// Tells listeners which customers a committed write may have changed, so that read caches can drop them.
///
/// A store publishes after its write transaction commits, never before, and only for its own writes: a cache fed
/// by it assumes this process is the ledger's only writer (true of `storekeeper serve` on its SQLite file).
public final class LedgerChangeFeed: Sendable {
    private let listeners = Mutex<[@Sendable (Set<String>) -> Void]>([])

    public init() {}

    /// Calls `listener` after every committed write that may have changed some customers, with their IDs.
    public func subscribe(_ listener: @escaping @Sendable (Set<String>) -> Void) {
        listeners.withLock { $0.append(listener) }
    }

    /// Called by stores after a commit.
    public func publish(_ customers: Set<String>) {
        guard !customers.isEmpty else { return }
        for listener in listeners.withLock({ $0 }) { listener(customers) }
    }
}
