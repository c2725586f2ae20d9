package import Foundation
import Synchronization

/// A clock the test moves: hand `{ clock.now }` to what takes a `now` function.
package final class TestClock: Sendable {
    private let date: Mutex<Date>
    package init(_ date: Date) { self.date = Mutex(date) }
    package var now: Date { date.withLock { $0 } }
    package func set(_ new: Date) { date.withLock { $0 = new } }
    package func advance(by interval: TimeInterval) { date.withLock { $0 += interval } }
}
