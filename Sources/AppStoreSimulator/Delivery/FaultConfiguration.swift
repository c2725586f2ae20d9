/// Faults the simulator injects, set at run time through `PUT /simulator/v1/faults` (and kept in its state).
///
/// Counters make failures deterministic for tests: "the next 3 API requests fail" rather than "10 % fail".
package struct FaultConfiguration: Codable, Hashable, Sendable {
    /// Apple's per-endpoint rate limits (requests per second; sandbox 10 % of production): 429 with error
    /// 4290000 and `Retry-After` when exceeded.
    package var rateLimitsEnabled = false
    /// The next N API requests answer 500 with 5000001 (retryable).
    package var failNextAPIRequests = 0
    /// The next N API requests answer 429 with 4290000 and `Retry-After`, whatever the rate.
    package var rateLimitNextAPIRequests = 0
    /// How far the `Retry-After` of those injected 429s is: the start of the second this many seconds after the
    /// current one (default 2: 1-2 s away, so tests can tell it from a backoff). 1-3600.
    package var rateLimitRetryAfterSeconds = 2
    /// Added to every API answer, in milliseconds.
    package var apiLatencyMilliseconds = 0
    /// The next N notification deliveries are dropped: nothing reaches the receiver and the attempt is recorded
    /// as `TIMED_OUT` (so production retries it later on Apple's schedule).
    package var dropNextNotifications = 0
    /// The next N notifications are delivered twice.
    package var duplicateNextNotifications = 0
    /// Notifications due together are delivered newest first.
    package var reorderNotifications = false
    /// Added before every notification delivery, in milliseconds.
    package var notificationDelayMilliseconds = 0

    package init() {}

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func value<T: Decodable>(_ key: CodingKeys, _ fallback: T) throws -> T {
            try container.decodeIfPresent(T.self, forKey: key) ?? fallback
        }
        rateLimitsEnabled = try value(.rateLimitsEnabled, false)
        failNextAPIRequests = try value(.failNextAPIRequests, 0)
        rateLimitNextAPIRequests = try value(.rateLimitNextAPIRequests, 0)
        rateLimitRetryAfterSeconds = try value(.rateLimitRetryAfterSeconds, 2)
        apiLatencyMilliseconds = try value(.apiLatencyMilliseconds, 0)
        dropNextNotifications = try value(.dropNextNotifications, 0)
        duplicateNextNotifications = try value(.duplicateNextNotifications, 0)
        reorderNotifications = try value(.reorderNotifications, false)
        notificationDelayMilliseconds = try value(.notificationDelayMilliseconds, 0)
        let counts: [(CodingKeys, Int)] = [
            (.failNextAPIRequests, failNextAPIRequests), (.rateLimitNextAPIRequests, rateLimitNextAPIRequests),
            (.apiLatencyMilliseconds, apiLatencyMilliseconds), (.dropNextNotifications, dropNextNotifications),
            (.duplicateNextNotifications, duplicateNextNotifications),
            (.notificationDelayMilliseconds, notificationDelayMilliseconds),
        ]
        if let (key, _) = counts.first(where: { !(0...1_000_000).contains($0.1) }) {
            throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "must be 0-1000000")
        }
        guard (1...3_600).contains(rateLimitRetryAfterSeconds) else {
            throw DecodingError.dataCorruptedError(forKey: .rateLimitRetryAfterSeconds, in: container, debugDescription: "must be 1-3600")
        }
    }
}
