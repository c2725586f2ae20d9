import Foundation
package import Logging

/// Runs a job every `interval` while this instance holds its ``JobLease``; the others poll for the lease every third
/// of its duration and take over when it lapses. Ends (giving the lease back) when the task is cancelled.
package struct LeasedSchedule: Sendable {
    package let lease: JobLease
    package let interval: Duration
    package let logger: Logger

    package init(lease: JobLease, interval: Duration, logger: Logger) {
        self.lease = lease
        self.interval = interval
        self.logger = logger
    }

    package func run(_ job: @escaping @Sendable () async -> Void) async {
        let clock = ContinuousClock()
        var nextRun = clock.now
        var holding = false
        let metadata: Logger.Metadata = ["job": .string(lease.job), "job.holder": .string(lease.holder)]
        while !Task.isCancelled {
            let held: Bool
            var failed = false
            do {
                held = try await lease.acquire()
            } catch {
                logger.warning(
                    "cannot take or renew a job's lease; trying again", metadata: metadata.merging(["error": .string(error.message)]) { $1 })
                held = false
                failed = true
            }
            if held != holding {
                // Not renewed because the database could not be asked is not the same as another instance holding it.
                let lost: Logger.Message =
                    failed
                    ? "job lease dropped: it could not be renewed; the job stops here until it can be taken again"
                    : "job lease lost: another instance runs the job"
                logger.info(held ? "job lease taken: this instance runs the job" : lost, metadata: metadata)
                holding = held
                if held { nextRun = clock.now }
            }
            if holding, clock.now >= nextRun {
                do {
                    try await lease.whileHolding { await job() }
                    nextRun = clock.now + interval
                } catch is CancellationError {
                    break
                } catch {
                    logger.warning("job lease lost during a run; the run was stopped", metadata: metadata)
                    holding = false
                }
            }
            let poll = lease.duration / 3
            let untilNext = nextRun - clock.now
            try? await Task.sleep(for: holding ? max(.milliseconds(1), min(poll, untilNext)) : poll)
        }
        // Given back at once, so another instance takes the job over without waiting for the lease to lapse; from a
        // task of its own, because this one is cancelled, and a store refuses work for a cancelled task.
        if holding { await Task { await lease.release() }.value }
    }
}
