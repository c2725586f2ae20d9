/// Keeps a client under Apple's per-endpoint rate limits (APPSTORE-SPEC §1.2): requests of each endpoint family
/// are spaced at least `1 / rate` apart, so no second ever holds more than the limit (sandbox: 10 %).
public actor RequestRateLimiter {
    /// An endpoint family with its own limit.
    public enum Family: String, Sendable, CaseIterable {
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
            case .general: return 50
            case .extendAndToken: return 20
            case .lookupAndRefunds: return 10
            case .massAndTest: return 1
            }
        }
    }

    private let rates: [Family: Double]
    private var nextFree: [Family: ContinuousClock.Instant] = [:]

    /// Apple's limits for production, or 10 % of them for sandbox; `scale` below 1 leaves headroom.
    public init(sandbox: Bool, scale: Double = 1) {
        var rates: [Family: Double] = [:]
        for family in Family.allCases { rates[family] = family.productionRate * (sandbox ? 0.1 : 1) * scale }
        self.rates = rates
    }

    /// Custom rates per family (requests per second); a family left out is not limited.
    public init(rates: [Family: Double]) {
        self.rates = rates
    }

    /// Waits until a request of `family` may be sent.
    public func acquire(_ family: Family) async throws {
        guard let rate = rates[family], rate > 0 else { return }
        let now = ContinuousClock.now
        let slot = max(now, nextFree[family] ?? now)
        nextFree[family] = slot + .milliseconds(Int64((1000 / rate).rounded(.up)))
        if slot > now { try await Task.sleep(until: slot, clock: .continuous) }
    }
}
