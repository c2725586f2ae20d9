import AppStoreModels
package import AppStoreServerAPI
package import AppStoreSigning
import Foundation
package import Logging
import Synchronization

/// Checks the ledger against the App Store, the source of truth (DESIGN rule 5), and repairs it: for each purchase in
/// scope, Get All Subscription Statuses and Get Transaction History v2 (every page), everything verified, compared
/// with the ledger field by field (``Drift``), then applied under the ledger's rules (older data never overwrites
/// newer). One Apple account's history and statuses cover all of its purchases of the app, so each account is
/// fetched once however many of its purchases are in scope. Calls go through the client's rate limiter; several run
/// at once so that the limiter, not the round trips, sets the pace.
package struct Reconciler: Sendable {
    package let app: VerifierKey
    let client: AppStoreServerAPIClient
    let verifier: SignedDataVerifier
    let store: any LedgerStore
    let logger: Logger
    /// Purchases reconciled at once (the limiter paces the calls).
    let concurrency: Int

    package init(
        app: VerifierKey, client: AppStoreServerAPIClient, verifier: SignedDataVerifier, store: any LedgerStore, logger: Logger,
        concurrency: Int = 8
    ) {
        self.app = app
        self.client = client
        self.verifier = verifier
        self.store = store
        self.logger = logger
        self.concurrency = max(1, concurrency)
    }

    /// What to reconcile.
    package enum Scope: Sendable, Hashable {
        /// Every purchase of one customer of the app.
        case customer(String)
        /// One purchase (any of its transaction IDs' original transaction ID).
        case originalTransactionId(String)
        /// Every auto-renewable subscription in the ledger.
        case allSubscriptions
    }

    /// What a reconciliation found and did.
    package struct Report: Codable, Sendable, Hashable {
        package var bundleId: String
        package var environment: String
        package var dryRun: Bool
        /// Purchases in scope, and those checked (the rest were covered by an account fetched for another).
        package var purchases = 0
        package var accountsFetched = 0
        package var requests = 0
        package var drift: [Drift] = []
        /// Records the ledger changed (0 in a dry run).
        package var recordsChanged = 0
        package var seconds = 0.0
        /// Whether every purchase in scope was checked: false in the report of a run that stopped (``Stopped``).
        package var complete = true
        /// Purchases checked before the run ended (all of them when it is ``complete``).
        package var checked = 0
    }

    /// The customer asked for has no data of the app in the environment (no purchase of theirs there, no token).
    package struct UnknownCustomer: Error, Sendable, CustomStringConvertible {
        package var customerId: String
        package var description: String { "no customer '\(customerId)'" }
    }

    /// A reconciliation that stopped before its end (the App Store or the ledger failed, or its task was cancelled,
    /// e.g. by Ctrl-C): what it had found and repaired until then, and why it stopped. What it repaired stays repaired.
    package struct Stopped: Error, Sendable {
        package var report: Report
        package var cause: any Error & Sendable
    }

    /// How far a run has got.
    package struct Progress: Sendable {
        package var done: Int
        package var total: Int
        package var requests: Int
        package var elapsed: Duration
    }

    package func reconcile(_ scope: Scope, dryRun: Bool, progress: (@Sendable (Progress) -> Void)? = nil) async throws -> Report {
        let started = ContinuousClock.now
        let originals = try await purchases(in: scope)
        let report = Report(bundleId: app.bundleId, environment: app.environment.rawValue, dryRun: dryRun, purchases: originals.count)
        let state = Shared(State(pending: originals))
        func totals() -> Report {
            let totals = state.value.withLock { $0.report }
            var report = report
            report.accountsFetched = totals.accountsFetched
            report.requests = totals.requests
            report.drift = totals.drift.sorted {
                ($0.originalTransactionId, $0.transactionId ?? "", $0.kind.rawValue, $0.field ?? "") < (
                    $1.originalTransactionId, $1.transactionId ?? "", $1.kind.rawValue, $1.field ?? ""
                )
            }
            report.recordsChanged = totals.recordsChanged
            report.checked = state.value.withLock { $0.done }
            report.seconds = (ContinuousClock.now - started) / .seconds(1)
            return report
        }
        do {
            try await run(state: state, originals: originals, dryRun: dryRun, started: started, progress: progress)
        } catch {
            var partial = totals()
            partial.complete = false
            throw Stopped(report: partial, cause: error)
        }
        return totals()
    }

    private func run(
        state: Shared, originals: [String], dryRun: Bool, started: ContinuousClock.Instant, progress: (@Sendable (Progress) -> Void)?
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<min(concurrency, max(1, originals.count)) {
                group.addTask {
                    while let original = state.value.withLock({ $0.next() }) {
                        try Task.checkCancellation()
                        let result = try await self.reconcile(original: original, dryRun: dryRun)
                        let snapshot = state.value.withLock { state in
                            state.finish(original, result)
                            return Progress(
                                done: state.done, total: originals.count, requests: state.report.requests, elapsed: ContinuousClock.now - started)
                        }
                        progress?(snapshot)
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// ``State`` behind a lock, shared by the workers.
    final class Shared: Sendable {
        let value: Mutex<State>
        init(_ state: State) { value = Mutex(state) }
    }

    /// The work shared by the workers: what is left, what is covered, the running totals.
    struct State {
        var pending: [String]
        var covered = Set<String>()
        var done = 0
        var report = Report(bundleId: "", environment: "", dryRun: false)

        mutating func next() -> String? {
            while let original = pending.popLast() {
                if covered.contains(original) {
                    done += 1
                    continue
                }
                covered.insert(original)
                return original
            }
            return nil
        }

        mutating func finish(_ original: String, _ result: AccountResult) {
            done += 1
            covered.formUnion(result.originals)
            report.accountsFetched += 1
            report.requests += result.requests
            report.drift += result.drift
            report.recordsChanged += result.changed
        }
    }

    /// What one account's reconciliation found.
    struct AccountResult: Sendable {
        var originals: Set<String>
        var requests: Int
        var drift: [Drift]
        var changed: Int
    }

    /// The original transaction IDs in scope, in the order they are taken (the last first).
    func purchases(in scope: Scope) async throws -> [String] {
        switch scope {
        case .originalTransactionId(let id):
            return [id]
        case .allSubscriptions:
            return try await store.subscriptionFamilies(bundleId: app.bundleId, environment: app.environment).reversed()
        case .customer(let id):
            guard try await store.customerExists(id, bundleId: app.bundleId, environment: app.environment) else {
                throw UnknownCustomer(customerId: id)
            }
            let ledger = try await store.ledger(for: id, bundleId: app.bundleId, environment: app.environment)
            let families = Set(
                ledger.transactions.values.filter { $0.info.bundleId == app.bundleId && ledger.customer(of: $0) == id }
                    .map(\.info.originalTransactionId))
            return families.sorted().reversed()
        }
    }

    /// Fetches one account (by one of its original transaction IDs), compares, and applies.
    func reconcile(original: String, dryRun: Bool) async throws -> AccountResult {
        let (snapshot, requests) = try await AppStoreSnapshot.fetch(account: original, client: client, verifier: verifier)
        let families = snapshot.families.filter { $0.environment == app.environment }
        let ledger = try await store.ledger(families: families.sorted())
        let drift = Drift.between(ledger, and: snapshot)
        var changed = 0
        if !dryRun, !drift.isEmpty {
            changed = try await store.applySnapshot(snapshot)
            logger.info(
                "reconciled",
                metadata: [
                    "app.bundle_id": .string(app.bundleId), "transaction.original_id": .string(original),
                    "reconcile.drift": .stringConvertible(drift.count), "reconcile.records_changed": .stringConvertible(changed),
                ])
        }
        return AccountResult(originals: Set(families.map(\.id)), requests: requests, drift: drift, changed: changed)
    }
}
