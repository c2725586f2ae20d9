package import AppStoreModels
package import Foundation
package import Logging

/// Answers "what is this customer of this app entitled to in this environment?": from the answer cache while no
/// write has changed the customer and nothing has expired since the answer was computed, else from the ledger. A
/// customer is known to an app in an environment only when the app has data for them there (a purchase of the app
/// that is theirs, or one of its tokens): anyone else is ``Outcome/unknownCustomer``, whoever asks.
///
/// `Rendered` is what the cache keeps (the server keeps the encoded JSON, so a hit costs no encoding).
package struct CustomerReader<Rendered: Sendable>: Sendable {
    package let store: any LedgerStore
    package let configuration: EntitlementConfiguration
    let cache: CustomerCache<Rendered>
    let render: @Sendable (CustomerAnswer) -> Rendered
    let logger: Logger
    let metrics: StorekeeperMetrics

    /// A reader whose cache drops a customer's answers whenever the store announces a write that may change them.
    package init(
        store: any LedgerStore, configuration: EntitlementConfiguration, cache: CustomerCache<Rendered>, logger: Logger,
        metrics: StorekeeperMetrics = .discarded, render: @escaping @Sendable (CustomerAnswer) -> Rendered
    ) {
        store.changes.subscribe { change in
            switch change {
            case .customers(let customers): cache.invalidate(customers)
            case .everyone: cache.invalidateAll()
            }
        }
        self.store = store
        self.configuration = configuration
        self.cache = cache
        self.render = render
        self.logger = logger
        self.metrics = metrics
    }

    package enum Outcome: Sendable {
        case found(Rendered)
        /// The app has no data for this customer in this environment.
        case unknownCustomer
        case storageFailure(StorageError)
    }

    /// The customer's answer at `now` (the clock is the caller's, so tests and the demo can move it).
    package func read(_ customerId: String, bundleId: String, environment: AppStoreEnvironment, now: @Sendable () -> Date) async -> Outcome {
        let variant = "\(bundleId) \(environment.rawValue)"
        let started = now()
        // A feed that may miss writes (another instance's, announced through a channel that is down) makes any
        // cached answer unsafe: read the ledger every time until it hears every write again.
        let cacheable = store.changes.isComplete
        if cacheable, let rendered = cache.value(customer: customerId, variant: variant, now: started) {
            metrics.customerCache(hit: true)
            return .found(rendered)
        }
        metrics.customerCache(hit: false)
        let ticket = cache.ticket()
        var ledger: Ledger
        do {
            ledger = try await store.entitlementLedger(for: customerId, bundleId: bundleId, environment: environment)
        } catch {
            logger.error("customer read failed", metadata: ["customer.id": .string(customerId), "error": .string(error.message)])
            return .storageFailure(error)
        }
        ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == bundleId }
        ledger.consumableTotals = ledger.consumableTotals.filter { $0.key.bundleId == bundleId }
        ledger.grants = ledger.grants.filter { $0.value.bundleId == bundleId }
        // Known in this app and environment only: a purchase of the app is theirs there, or they own one of its
        // tokens there. Another app's customer, or the other environment's, is unknown like a customer nobody knows.
        let known =
            !ledger.consumableTotals.isEmpty || ledger.tokenOwners.values.contains(customerId)
            || ledger.grants.values.contains { $0.customerId == customerId }
            || ledger.transactions.values.contains { ledger.customer(of: $0) == customerId }
        guard known else { return .unknownCustomer }
        let at = now()
        let answer = CustomerAnswer(for: customerId, in: ledger, bundleId: bundleId, environment: environment, configuration: configuration, at: at)
        let rendered = render(answer)
        if cacheable { cache.store(rendered, customer: customerId, variant: variant, validUntil: answer.validUntil, now: at, ticket: ticket) }
        return .found(rendered)
    }
}
