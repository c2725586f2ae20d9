import Crypto
import Foundation
import Synchronization

/// How the verifier caches certificate chains that passed validation.
public struct ChainCachePolicy: Sendable, Hashable {
    /// How many distinct chains to keep; the oldest goes first when full.
    public var maximumEntries: Int
    /// How long a validated chain is trusted without being validated again.
    public var maximumAge: Duration

    public init(maximumEntries: Int = 32, maximumAge: Duration = .seconds(15 * 60)) {
        self.maximumEntries = maximumEntries
        self.maximumAge = maximumAge
    }

    /// Apple's choice: 32 chains for 15 minutes.
    public static let `default` = ChainCachePolicy()

    /// No caching: every JWS gets full chain validation.
    public static let disabled = ChainCachePolicy(maximumEntries: 0, maximumAge: .zero)

    var isEnabled: Bool { maximumEntries > 0 && maximumAge > .zero }
}

/// Counters of a verifier's chain cache.
public struct ChainCacheStatistics: Sendable, Hashable {
    /// Look-ups answered from the cache.
    public var hits: Int = 0
    /// Look-ups that needed full validation.
    public var misses: Int = 0
    /// Chains stored after passing validation.
    public var insertions: Int = 0
    /// Chains dropped because the cache was full or they were too old.
    public var evictions: Int = 0
    /// Chains held now.
    public var count: Int = 0
}

/// Chains that passed full validation, keyed by the exact DER bytes of their three certificates.
///
/// Only successes are stored. An entry remembers the window in which all three certificates are valid, so a hit
/// still judges validity at each payload's own time; outside the window the chain is validated again (and fails
/// with the precise reason).
final class ChainCache: Sendable {
    struct Entry: Sendable {
        let leafKey: P256.Signing.PublicKey
        let validityWindow: ClosedRange<Date>
        let storedAt: ContinuousClock.Instant
    }

    private struct State {
        var entries: [[[UInt8]]: Entry] = [:]
        var statistics = ChainCacheStatistics()
    }

    let policy: ChainCachePolicy
    private let now: @Sendable () -> ContinuousClock.Instant
    private let state = Mutex(State())

    init(policy: ChainCachePolicy, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.policy = policy
        self.now = now
    }

    /// The entry for these certificates, if one is stored and young enough.
    func entry(for certificates: [[UInt8]]) -> Entry? {
        guard policy.isEnabled else { return nil }
        let now = self.now()
        return state.withLock { state in
            guard let entry = state.entries[certificates] else {
                state.statistics.misses += 1
                return nil
            }
            guard now - entry.storedAt < policy.maximumAge else {
                state.entries[certificates] = nil
                state.statistics.evictions += 1
                state.statistics.misses += 1
                state.statistics.count = state.entries.count
                return nil
            }
            state.statistics.hits += 1
            return entry
        }
    }

    /// Stores a chain that has just passed validation.
    func store(_ certificates: [[UInt8]], leafKey: P256.Signing.PublicKey, validityWindow: ClosedRange<Date>) {
        guard policy.isEnabled else { return }
        let entry = Entry(leafKey: leafKey, validityWindow: validityWindow, storedAt: now())
        state.withLock { state in
            if state.entries[certificates] == nil, state.entries.count >= policy.maximumEntries,
                let oldest = state.entries.min(by: { $0.value.storedAt < $1.value.storedAt })?.key
            {
                state.entries[oldest] = nil
                state.statistics.evictions += 1
            }
            state.entries[certificates] = entry
            state.statistics.insertions += 1
            state.statistics.count = state.entries.count
        }
    }

    var statistics: ChainCacheStatistics {
        state.withLock { $0.statistics }
    }
}
