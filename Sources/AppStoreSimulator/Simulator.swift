import AppStoreModels
import AppStoreReceipts
import AppStoreSigning
package import Crypto
package import Foundation

/// The running simulator: the lifecycle engine behind one actor, each change saved to its database before it is
/// acknowledged.
///
/// Every action goes through ``perform(_:)``: it runs on the engine in place (all or nothing), and the records it
/// wrote are committed to the directory's database (``SimulatorStore``) before the call returns, so a restart or a
/// crash (even a SIGKILL) keeps everything that was acknowledged. Concurrent actions share commits: while one commit
/// is being written, the actions that arrive are applied and wait for the next, which writes all of them in one
/// database transaction (group commit), so a busy simulator pays one `fsync` per batch, not per action.
///
/// Reads through ``read(_:)`` wait until everything applied before them is committed, so nothing outside the
/// simulator sees a change that a crash could still lose. If the database cannot be written, the simulator stops
/// acknowledging actions (each answers a `storage` error) until it is restarted from what was committed.
package actor Simulator {
    package private(set) var engine: LifecycleEngine
    package let directory: SimulatorDirectory?
    /// The API key clients must sign tokens with.
    package let apiKey: SimulatorDirectory.APIKeyInfo?
    let apiPublicKey: P256.Signing.PublicKey?
    let store: SimulatorStore?

    /// Changes applied and not yet handed to a commit.
    private var unsaved = SimulatorChanges()
    /// The scalars last handed to a commit (they are written only when they change).
    private var savedScalars: SimulatorState.Scalars?
    /// Actions applied with changes, and how many of them are committed.
    private var appliedCount = 0
    private var committedCount = 0
    private var committing = false
    private var commitWaiters: [CheckedContinuation<Void, Never>] = []
    private var storageFailure: SimulatorError?
    /// Whether an advance is moving the clock; the others wait their turn.
    private var advancing = false
    private var advanceWaiters: [CheckedContinuation<Void, Never>] = []
    private var rateLimiter = RateLimiter()

    /// Loads the simulator kept in `directory` (importing its `state.json` on first open, if it has one).
    package init(directory: SimulatorDirectory) throws(SimulatorError) {
        let authority = try directory.loadAuthority()
        let signer: JWSSigner
        let receiptSigner: ReceiptSigner
        do {
            // One leaf signs both: JWS and app receipts chain to the same root (the app's trusted root).
            let (key, chain) = try authority.issueLeaf()
            signer = try JWSSigner(privateKey: key, certificateChain: chain)
            receiptSigner = try ReceiptSigner(privateKey: key, certificateChain: chain)
        } catch {
            throw SimulatorError(.storage, "cannot issue a signing certificate: \(error)")
        }
        let store = try directory.openStore()
        var state = try store.load()
        self.savedScalars = state.scalars
        state.forgetChanges()
        var engine = try LifecycleEngine(catalog: try directory.loadCatalog(), state: state, signer: signer)
        engine.receiptSigner = receiptSigner
        let apiKey = try directory.loadAPIKeyInfo()
        let apiPublicKey = try directory.loadAPIPublicKey()
        // Its In-App Purchase key signs offers too, as App Store Connect's do.
        engine.offerKey = OfferKey(keyId: apiKey.keyId, issuerId: apiKey.issuerId, publicKey: apiPublicKey)
        engine.scenarioOfferKey = try? AppStoreAPIKey(
            issuerID: apiKey.issuerId, keyID: apiKey.keyId, bundleID: "any", privateKeyFile: directory.apiPrivateKeyFile(keyId: apiKey.keyId).path)
        self.engine = engine
        self.directory = directory
        self.store = store
        self.apiKey = apiKey
        self.apiPublicKey = apiPublicKey
    }

    /// An in-memory simulator (nothing saved), for tests.
    package init(
        engine: LifecycleEngine,
        apiKey: SimulatorDirectory.APIKeyInfo? = nil,
        apiPublicKey: P256.Signing.PublicKey? = nil
    ) {
        self.engine = engine
        self.directory = nil
        self.store = nil
        self.apiKey = apiKey
        self.apiPublicKey = apiPublicKey
    }

    /// Runs an action on the engine; it applies completely or not at all, and on success what it changed is
    /// committed before this returns.
    package func perform<Result: Sendable>(
        _ action: (inout LifecycleEngine) throws(SimulatorError) -> Result
    ) async throws(SimulatorError) -> Result {
        if let storageFailure { throw storageFailure }
        let result = try engine.transaction(action)
        try await waitUntilCommitted(takeChanges())
        return result
    }

    /// Runs an action that nobody acknowledges (a delivery attempt) without waiting for its commit: it is visible at
    /// once and written by the next commit, which ``commitApplied()``, any ``perform(_:)`` or any ``read(_:)`` makes.
    func apply(_ action: (inout LifecycleEngine) throws(SimulatorError) -> Void) throws(SimulatorError) {
        if let storageFailure { throw storageFailure }
        try engine.transaction(action)
        _ = takeChanges()
    }

    /// Returns once everything applied so far is committed.
    func commitApplied() async throws(SimulatorError) {
        try await waitUntilCommitted(appliedCount)
    }

    /// Reads from the engine without changing it, once everything applied before is committed.
    package func read<Result: Sendable>(_ body: (LifecycleEngine) throws(SimulatorError) -> Result) async throws(SimulatorError) -> Result {
        try await waitUntilCommitted(appliedCount)
        return try body(engine)
    }

    /// The state as it is now (including changes still being committed).
    package var state: SimulatorState { engine.state }

    /// The virtual clock.
    package var now: Date { engine.state.now }

    /// Whether notifications have somewhere to go.
    package var hasNotificationURL: Bool { engine.state.notificationURL != nil }

    /// Whether the clock follows real time while served.
    package var clockRunning: Bool { engine.state.clockRunning }

    // MARK: - Group commit

    /// Moves the changes of the action just applied to the next commit; returns the count of applied actions to
    /// wait for (all of them, so an action that read another's uncommitted change returns only once it is durable).
    private func takeChanges() -> Int {
        guard store != nil else {
            engine.state.forgetChanges()
            return appliedCount
        }
        var changes = engine.state.takeChanges()
        if changes.scalars == savedScalars {
            changes.scalars = nil
        } else {
            savedScalars = changes.scalars
        }
        guard !changes.isEmpty else { return appliedCount }
        unsaved.merge(changes)
        appliedCount += 1
        return appliedCount
    }

    /// Returns once the first `count` applied actions are committed; the caller commits them itself if no commit is
    /// being written, else it waits for that one to end and looks again.
    private func waitUntilCommitted(_ count: Int) async throws(SimulatorError) {
        while committedCount < count {
            if let storageFailure { throw storageFailure }
            guard !committing, let store else {
                await withCheckedContinuation { commitWaiters.append($0) }
                continue
            }
            committing = true
            let batch = unsaved
            let upTo = appliedCount
            unsaved = SimulatorChanges()
            do {
                try await store.commit(batch)
                committedCount = upTo
            } catch {
                storageFailure = SimulatorError(
                    .storage, "\(error.message); the simulator acknowledges no more actions until it is restarted"
                )
            }
            committing = false
            let waiters = commitWaiters
            commitWaiters = []
            for waiter in waiters { waiter.resume() }
        }
    }

    // MARK: - The clock

    /// Moves the clock forward by `interval`, one due time at a time (see ``advance(to:deliver:)``).
    package func advance(by interval: TimeInterval, deliver: @Sendable () async -> Void) async throws(SimulatorError) {
        guard interval >= 0 else { throw SimulatorError(.invalidRequest, "the clock only moves forward") }
        try await advance(to: engine.state.now.addingTimeInterval(interval), deliver: deliver)
    }

    /// Moves the clock to `target`, stopping at every moment something falls due on the way: each renewal, grace or
    /// billing-retry expiry is played at its own time (``LifecycleEngine/step(toward:)``), and after each step
    /// `deliver` runs (the deliverer attempts what is due then, and records the attempt at that virtual time), so a
    /// notification's first attempt is at its creation and each retry at its scheduled time.
    ///
    /// Each step is one action (all or nothing, committed before the next); an advance refused at the start changes
    /// nothing. If a step fails, the clock stays where the last step left it and the error is thrown. Advances run
    /// one at a time; one that finds the clock already past its target returns at once.
    package func advance(to target: Date, deliver: @Sendable () async -> Void) async throws(SimulatorError) {
        guard target >= engine.state.now else {
            throw SimulatorError(.invalidRequest, "the clock only moves forward (now \(engine.state.now.formatted(.iso8601)))")
        }
        try LifecycleEngine.checkAdvance(from: engine.state.now, to: target)
        while advancing { await withCheckedContinuation { advanceWaiters.append($0) } }
        advancing = true
        defer {
            advancing = false
            if !advanceWaiters.isEmpty { advanceWaiters.removeFirst().resume() }
        }
        await deliver()
        while true {
            let reached = try await perform { (engine) throws(SimulatorError) in try engine.step(toward: target) }
            await deliver()
            if reached { return }
        }
    }

    // MARK: - API faults

    /// Applies API faults and rate limits to one request: the error to answer instead, if any, and the latency
    /// to add. Counted faults are used up (and saved).
    func admitAPIRequest(bundleId: String, family: APIRateLimitFamily) async -> (AppStoreAPIError?, Int) {
        var faults = engine.state.faults
        let latency = faults.apiLatencyMilliseconds
        var answer: AppStoreAPIError? = nil
        let nowSeconds = Int64(Date().timeIntervalSince1970)
        if faults.failNextAPIRequests > 0 {
            faults.failNextAPIRequests -= 1
            answer = .generalInternalRetryable
        } else if faults.rateLimitNextAPIRequests > 0 {
            faults.rateLimitNextAPIRequests -= 1
            // An injected 429 asks for a wait of 1-2 seconds by default, so tests can tell it from a backoff.
            answer = .rateLimitExceeded
            answer?.retryAfter = String((nowSeconds + Int64(faults.rateLimitRetryAfterSeconds)) * 1000)
        } else if faults.rateLimitsEnabled,
            let retry = rateLimiter.admit(
                bundleId: bundleId, family: family, sandbox: engine.state.environment != .production, now: Date()
            )
        {
            answer = .rateLimitExceeded
            answer?.retryAfter = String(retry)
        }
        if faults != engine.state.faults {
            let used = faults
            _ = try? await perform { engine in engine.state.faults = used }
        }
        return (answer, latency)
    }
}
