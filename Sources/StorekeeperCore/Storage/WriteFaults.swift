package import Foundation
import Synchronization

/// The database's own failures of a store's writes (a full disk, an I/O error, a read-only file, a lost or refusing
/// server), for `/health`: a database that answers reads but refuses every write is not healthy, and a load balancer
/// or monitor that asks `/health` must hear it. A write the unit of work refused (a conflict, bad input) is not one.
///
/// Writes are failing from a fault until a write succeeds, and for `holdDown` after the last fault in any case: while
/// a disk is full, a small write (a job's lease) can still fit where a notification's does not, and `/health` must not
/// turn healthy between two failed notifications.
package final class WriteFaults: Sendable {
    private struct State {
        var lastFault: (at: Date, reason: String)?
        var faultsSinceSuccess = 0
    }

    private let state = Mutex(State())
    /// How long `/health` reports a fault after the last one, writes succeeding or not.
    package let holdDown: TimeInterval

    package init(holdDown: TimeInterval = 60) {
        self.holdDown = holdDown
    }

    /// A write committed.
    package func succeeded() {
        state.withLock { state in
            state.faultsSinceSuccess = 0
        }
    }

    /// A write failed because of the database (`reason`: what the store says of it, naming no value of the write).
    package func failed(_ reason: String, at date: Date = Date()) {
        state.withLock { state in
            state.lastFault = (date, reason)
            state.faultsSinceSuccess += 1
        }
    }

    /// Why writes are failing now, or `nil` when they are not.
    package func failure(at now: Date = Date()) -> String? {
        state.withLock { state in
            guard let fault = state.lastFault else { return nil }
            let ago = max(0, Int(now.timeIntervalSince(fault.at).rounded()))
            if state.faultsSinceSuccess == 0 {
                guard ago < Int(holdDown) else { return nil }
                return "a write failed \(ago) s ago, others have succeeded since: \(fault.reason)"
            }
            let count = state.faultsSinceSuccess == 1 ? "the last write" : "the last \(state.faultsSinceSuccess) writes"
            return "writes are failing: \(count) failed, the latest \(ago) s ago: \(fault.reason)"
        }
    }
}
