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
///
/// Beside the chains, the cache remembers which exact protected-header texts decoded to them (with `alg` ES256 and
/// these `x5c` certificates). Decoding a header is a pure function of its bytes, so a JWS whose header text is
/// byte-identical to one seen before skips decoding it, and the steady-state cost is one ECDSA verification plus
/// the payload's decoding. Header memos live and die with their chain's entry.
final class ChainCache: Sendable {
    struct Entry: Sendable {
        let leafKey: P256.Signing.PublicKey
        let validityWindow: ClosedRange<Date>
        let storedAt: ContinuousClock.Instant
        /// Header texts known to carry this chain (a few at most).
        var headerSegments: [[UInt8]] = []
    }

    /// The exact DER bytes of a chain's certificates, hashed in bulk.
    struct Key: Hashable, Sendable {
        let certificates: [[UInt8]]

        func hash(into hasher: inout Hasher) {
            hasher.combine(certificates.count)
            for certificate in certificates {
                hasher.combine(certificate.count)
                certificate.withUnsafeBytes { hasher.combine(bytes: $0) }
            }
        }
    }

    /// A protected header's base64url text, hashed in bulk.
    struct HeaderKey: Hashable, Sendable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var headers: [HeaderKey: Key] = [:]
        var statistics = ChainCacheStatistics()

        mutating func remove(_ key: Key) {
            guard let entry = entries.removeValue(forKey: key) else { return }
            for header in entry.headerSegments { headers[HeaderKey(bytes: header)] = nil }
            statistics.evictions += 1
            statistics.count = entries.count
        }
    }

    /// How many header texts one chain remembers.
    static let headersPerChain = 4

    let policy: ChainCachePolicy
    private let now: @Sendable () -> ContinuousClock.Instant
    private let state = Mutex(State())

    init(policy: ChainCachePolicy, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.policy = policy
        self.now = now
    }

    /// The entry for a header text seen before, with its certificates, if stored and young enough. Does not
    /// count a miss: the caller goes on to decode the header and look up its certificates.
    func entry(forHeader segment: [UInt8]) -> (Entry, [[UInt8]])? {
        guard policy.isEnabled else { return nil }
        let now = self.now()
        return state.withLock { state in
            guard let key = state.headers[HeaderKey(bytes: segment)], let entry = state.entries[key] else {
                return nil
            }
            guard now - entry.storedAt < policy.maximumAge else {
                state.remove(key)
                return nil
            }
            state.statistics.hits += 1
            return (entry, key.certificates)
        }
    }

    /// The entry for these certificates, if one is stored and young enough; remembers `header` as carrying them.
    func entry(for certificates: [[UInt8]], header segment: [UInt8]) -> Entry? {
        guard policy.isEnabled else { return nil }
        let key = Key(certificates: certificates)
        let now = self.now()
        return state.withLock { state in
            guard var entry = state.entries[key] else {
                state.statistics.misses += 1
                return nil
            }
            guard now - entry.storedAt < policy.maximumAge else {
                state.remove(key)
                state.statistics.misses += 1
                return nil
            }
            if entry.headerSegments.count < Self.headersPerChain {
                entry.headerSegments.append(segment)
                state.entries[key] = entry
                state.headers[HeaderKey(bytes: segment)] = key
            }
            state.statistics.hits += 1
            return entry
        }
    }

    /// Stores a chain that has just passed validation, with the header text that carried it.
    func store(
        _ certificates: [[UInt8]],
        header segment: [UInt8],
        leafKey: P256.Signing.PublicKey,
        validityWindow: ClosedRange<Date>
    ) {
        guard policy.isEnabled else { return }
        let key = Key(certificates: certificates)
        let entry = Entry(leafKey: leafKey, validityWindow: validityWindow, storedAt: now(), headerSegments: [segment])
        state.withLock { state in
            state.remove(key)
            if state.entries.count >= policy.maximumEntries,
                let oldest = state.entries.min(by: { $0.value.storedAt < $1.value.storedAt })?.key
            {
                state.remove(oldest)
            }
            state.entries[key] = entry
            state.headers[HeaderKey(bytes: segment)] = key
            state.statistics.insertions += 1
            state.statistics.count = state.entries.count
        }
    }

    var statistics: ChainCacheStatistics {
        state.withLock { $0.statistics }
    }
}
