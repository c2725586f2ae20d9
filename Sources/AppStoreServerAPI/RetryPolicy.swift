package import Foundation

/// How the client retries: exponential backoff with full jitter, honouring `Retry-After`, bounded by a total
/// deadline. Only retryable failures are retried (``AppStoreServerAPIError/isRetryable``); others return at once.
package struct RetryPolicy: Sendable, Hashable {
    /// Attempts in all, the first included.
    package var maximumAttempts: Int
    /// The backoff before the first retry; it doubles each time up to ``maximumBackoff``.
    package var initialBackoff: Duration
    package var maximumBackoff: Duration
    /// The longest a call may take, retries and waits included.
    package var deadline: Duration
    /// The longest one attempt may take.
    package var attemptTimeout: Duration

    package init(
        maximumAttempts: Int = 5,
        initialBackoff: Duration = .milliseconds(500),
        maximumBackoff: Duration = .seconds(20),
        deadline: Duration = .seconds(60),
        attemptTimeout: Duration = .seconds(30)
    ) {
        self.maximumAttempts = maximumAttempts
        self.initialBackoff = initialBackoff
        self.maximumBackoff = maximumBackoff
        self.deadline = deadline
        self.attemptTimeout = attemptTimeout
    }

    /// Five attempts within a minute.
    package static let `default` = RetryPolicy()

    /// One attempt, like Apple's libraries.
    package static let none = RetryPolicy(maximumAttempts: 1)

    /// The wait before retry number `retry` (1-based): a random duration up to the capped exponential backoff.
    func backoff(retry: Int) -> Duration {
        let exponent = Double(1 << min(retry - 1, 20))
        let cap = min(initialBackoff / .seconds(1) * exponent, maximumBackoff / .seconds(1))
        return .milliseconds(Int64(Double.random(in: 0...cap) * 1000))
    }

    /// Reads `Retry-After`: Apple documents a UNIX time in milliseconds; a UNIX time in seconds and a number of
    /// seconds to wait are accepted too. Returns the moment after which a retry may be sent.
    package static func retryAfter(_ value: String, now: Date = Date()) -> Date? {
        guard let number = Double(value.trimmingCharacters(in: .whitespaces)), number >= 0 else { return nil }
        if number >= 1e12 { return Date(timeIntervalSince1970: number / 1000) }
        if number >= 1e9 { return Date(timeIntervalSince1970: number) }
        return now.addingTimeInterval(number)
    }
}
