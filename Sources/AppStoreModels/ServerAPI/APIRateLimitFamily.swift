/// The App Store Server API's rate-limit families (APPSTORE-SPEC §1.2): each endpoint belongs to one, whose limit
/// in requests per second per app Apple enforces over an hour; sandbox gets 10 %. The one table the client (to pace
/// itself) and the simulator (to refuse as Apple does) share, through ``AppStoreEndpoint``.
public enum APIRateLimitFamily: String, Sendable, CaseIterable, Hashable {
    /// Finish Transaction, Get (App) Transaction Info, history, statuses, consumption, notification history: 50/s.
    case general
    /// Extend a Subscription Renewal Date, Set App Account Token: 20/s.
    case extendAndToken
    /// Look Up Order ID, Get Refund History: 10/s.
    case lookupAndRefunds
    /// Mass extension, its status, Request a Test Notification, Get Test Notification Status: 1/s.
    case massAndTest

    /// Apple's production limit in requests per second.
    public var productionRate: Double {
        switch self {
        case .general: 50
        case .extendAndToken: 20
        case .lookupAndRefunds: 10
        case .massAndTest: 1
        }
    }

    /// The limit in an environment: production's, or 10 % of it in sandbox.
    public func rate(sandbox: Bool) -> Double { sandbox ? productionRate / 10 : productionRate }

    /// The family of a request to `path` (Apple's paths, under `/inApps`), by ``AppStoreEndpoint/all``; `general` for a
    /// path that is none of Apple's endpoints.
    public static func of(path: String) -> APIRateLimitFamily {
        AppStoreEndpoint.all.first { $0.matches(path: path) }?.family ?? .general
    }
}
