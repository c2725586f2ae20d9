import Foundation

/// Apple's per-endpoint rate limits (APPSTORE-SPEC §1.2), per app, per second; sandbox gets 10 %.
struct RateLimiter: Sendable {
    /// Requests per second in production, by endpoint family.
    static func limit(method: String, path: String) -> (family: String, perSecond: Int) {
        if path.hasPrefix("/inApps/v1/subscriptions/extend/mass") { return ("mass-extend", 1) }
        if path.hasPrefix("/inApps/v1/notifications/test") { return ("test-notification", 1) }
        if path.hasPrefix("/inApps/v1/subscriptions/extend/") || path.hasSuffix("/appAccountToken") { return ("extend", 20) }
        if path.hasPrefix("/inApps/v1/lookup/") || path.contains("/refund/lookup/") { return ("lookup-refunds", 10) }
        return ("general", 50)
    }

    private var windows: [String: (second: Int64, count: Int)] = [:]

    /// Counts a request; returns the time (epoch ms) after which the caller may retry, if over the limit.
    mutating func admit(bundleId: String, method: String, path: String, sandbox: Bool, now: Date) -> Int64? {
        let (family, production) = Self.limit(method: method, path: path)
        let perSecond = max(1, sandbox ? production / 10 : production)
        let key = bundleId + "|" + family
        let second = Int64(now.timeIntervalSince1970)
        var window: (second: Int64, count: Int) = windows[key].flatMap { $0.second == second ? $0 : nil } ?? (second, 0)
        window.count += 1
        windows[key] = window
        return window.count > perSecond ? (second + 1) * 1000 : nil
    }
}
