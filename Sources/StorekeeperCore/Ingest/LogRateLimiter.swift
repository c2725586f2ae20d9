package import Foundation
import Synchronization

/// Lets at most `linesPerWindow` lines through per window of `window` seconds, and counts the rest, so that a
/// client sending junk as fast as it can grows the log by a bounded number of lines a minute. The first line let
/// through after some were held back says how many.
package final class LogRateLimiter: Sendable {
    package let linesPerWindow: Int
    package let window: TimeInterval
    private let state = Mutex<(windowStart: Date, lines: Int, suppressed: Int)>((.distantPast, 0, 0))

    package init(linesPerWindow: Int = 30, window: TimeInterval = 60) {
        self.linesPerWindow = linesPerWindow
        self.window = window
    }

    /// Whether a line may be written now, and how many were held back since the last one written.
    package func admit(now: Date = Date()) -> (allowed: Bool, suppressed: Int) {
        state.withLock { state in
            if now.timeIntervalSince(state.windowStart) >= window {
                state.windowStart = now
                state.lines = 0
            }
            guard state.lines < linesPerWindow else {
                state.suppressed += 1
                return (false, 0)
            }
            state.lines += 1
            defer { state.suppressed = 0 }
            return (true, state.suppressed)
        }
    }
}
