import ServiceLifecycle

/// A ledger store as a service of the application's `ServiceGroup`: the store's background work (PostgreSQL's
/// connections, change listener and checkout watch) runs from the store's opening until the group's graceful shutdown
/// reaches this service, which then closes the store and runs `afterClose` (the SQLite ledger's lock). Put first in
/// the group, it is stopped last: after the HTTP server has answered its last request and every job has ended.
package struct LedgerStoreService: Service {
    package let store: any LedgerStore
    package let afterClose: @Sendable () async -> Void

    package init(store: any LedgerStore, afterClose: @escaping @Sendable () async -> Void = {}) {
        self.store = store
        self.afterClose = afterClose
    }

    package func run() async throws {
        // Returns at graceful shutdown, throws when cancelled: the store is closed either way.
        try? await gracefulShutdown()
        await store.close()
        await afterClose()
    }
}
