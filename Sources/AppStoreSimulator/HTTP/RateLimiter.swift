import AppStoreModels
import Foundation

/// Apple's per-endpoint rate limits (APPSTORE-SPEC §1.2, ``APIRateLimitFamily``, the table the client paces itself
/// by): requests per second per app and endpoint family, which Apple "enforces on an hourly basis"; sandbox gets
/// 10 %. Modelled as a token bucket per family that refills at the limit and holds ``burstSeconds`` worth, so a
/// sustained rate above the limit is refused while a short bunching of requests is not.
///
/// A bunching is what a paced client's requests become when the simulator's process stalls (a loaded machine):
/// they wait in sockets and arrive together when it runs again. Apple, counting over an hour, would not refuse
/// them; a bucket of one second's worth did, after a stall of a little over a second.
struct RateLimiter: Sendable {
    /// The seconds of requests at the limit a bucket holds: much stricter than Apple's hour, and still far below what
    /// an unpaced burst sends.
    static let burstSeconds = 5.0

    private var buckets: [String: (tokens: Double, updated: Date)] = [:]

    /// Counts a request; returns the time (epoch ms) after which the caller may retry, if over the limit.
    mutating func admit(bundleId: String, family: APIRateLimitFamily, sandbox: Bool, now: Date) -> Int64? {
        let rate = family.rate(sandbox: sandbox)
        let capacity = max(1, rate * Self.burstSeconds)
        let key = bundleId + "|" + family.rawValue
        var bucket = buckets[key] ?? (capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + max(0, now.timeIntervalSince(bucket.updated)) * rate)
        bucket.updated = now
        defer { buckets[key] = bucket }
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
            return nil
        }
        let wait = (1 - bucket.tokens) / rate
        return Int64(((now.timeIntervalSince1970 + wait) * 1000).rounded(.up))
    }
}
