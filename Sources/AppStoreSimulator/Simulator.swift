import AppStoreModels
import AppStoreSigning
public import Crypto
import Foundation

/// The running simulator: the lifecycle engine behind one lock, saved to its directory after every change.
///
/// Every action goes through ``perform(_:)``: it runs on the engine and, if it succeeds, the new state is written
/// before the call returns, so a restart (or a crash) keeps everything that was acknowledged.
public actor Simulator {
    public private(set) var engine: LifecycleEngine
    public let directory: SimulatorDirectory?
    /// The API key clients must sign tokens with.
    public let apiKey: SimulatorDirectory.APIKeyInfo?
    let apiPublicKey: P256.Signing.PublicKey?

    /// Loads the simulator saved in `directory`.
    public init(directory: SimulatorDirectory) throws(SimulatorError) {
        let authority = try directory.loadAuthority()
        let signer: JWSSigner
        do {
            signer = try authority.makeSigner()
        } catch {
            throw SimulatorError(.storage, "cannot issue a signing certificate: \(error)")
        }
        self.engine = try LifecycleEngine(
            catalog: try directory.loadCatalog(), state: try directory.loadState(), signer: signer
        )
        self.directory = directory
        self.apiKey = try directory.loadAPIKeyInfo()
        self.apiPublicKey = try directory.loadAPIPublicKey()
    }

    /// An in-memory simulator (nothing saved), for tests.
    public init(
        engine: LifecycleEngine,
        apiKey: SimulatorDirectory.APIKeyInfo? = nil,
        apiPublicKey: P256.Signing.PublicKey? = nil
    ) {
        self.engine = engine
        self.directory = nil
        self.apiKey = apiKey
        self.apiPublicKey = apiPublicKey
    }

    /// Runs an action on the engine; on success the state is saved before returning.
    public func perform<Result: Sendable>(
        _ action: (inout LifecycleEngine) throws(SimulatorError) -> Result
    ) throws(SimulatorError) -> Result {
        var copy = engine
        let result = try action(&copy)
        try directory?.save(copy.state)
        engine = copy
        return result
    }

    /// Reads from the engine without changing it.
    public func read<Result: Sendable>(_ body: (LifecycleEngine) throws(SimulatorError) -> Result) throws(SimulatorError) -> Result {
        try body(engine)
    }

    public var state: SimulatorState { engine.state }

    private var rateLimiter = RateLimiter()

    /// Applies API faults and rate limits to one request: the error to answer instead, if any, and the latency
    /// to add. Counted faults are used up (and saved).
    func admitAPIRequest(bundleId: String, method: String, path: String) -> (AppStoreAPIError?, Int) {
        var faults = engine.state.faults
        let latency = faults.apiLatencyMilliseconds
        var answer: AppStoreAPIError? = nil
        let nowSeconds = Int64(Date().timeIntervalSince1970)
        if faults.failNextAPIRequests > 0 {
            faults.failNextAPIRequests -= 1
            answer = .generalInternalRetryable
        } else if faults.rateLimitNextAPIRequests > 0 {
            faults.rateLimitNextAPIRequests -= 1
            // An injected 429 asks for a wait of 1-2 seconds, so tests can tell it from a backoff.
            answer = .rateLimitExceeded
            answer?.retryAfter = String((nowSeconds + 2) * 1000)
        } else if faults.rateLimitsEnabled,
            let retry = rateLimiter.admit(
                bundleId: bundleId, method: method, path: path, sandbox: engine.state.environment != .production, now: Date()
            )
        {
            answer = .rateLimitExceeded
            answer?.retryAfter = String(retry)
        }
        if faults != engine.state.faults {
            _ = try? perform { engine in engine.state.faults = faults }
        }
        return (answer, latency)
    }
}
