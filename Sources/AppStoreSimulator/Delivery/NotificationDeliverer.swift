import AppStoreModels
package import AsyncHTTPClient
import Foundation
package import Logging
package import NIOCore
import NIOHTTP1
import ServiceLifecycle

/// Delivers notifications as the App Store does: POST `{"signedPayload": …}` to the configured URL; HTTP 200-206
/// is success, anything else (or no answer) a failure that production retries on Apple's schedule, measured on the
/// simulator's clock. Every attempt is recorded for Get Notification History, dated at the virtual time its round
/// began. Faults (drop, duplicate, reorder, delay) apply here.
///
/// Deliveries go in rounds, one at a time: a round takes every notification due, posts each and records each
/// attempt at once (Get Notification History shows it), and ends with one commit for all of them. A caller of ``deliverDue()`` that finds a round under way waits for the next one (which
/// sees what became due meanwhile) and, when it ends, one of the waiters leads the round after it, so no caller
/// waits for more than two rounds however busy the simulator is.
package actor NotificationDeliverer: Service {
    let simulator: Simulator
    let client: HTTPClient
    let logger: Logger
    /// How long to wait for the receiver; Apple publishes no figure, and its engineers call 30 s too long.
    let timeout: TimeAmount
    private var delivering = false
    private var roundsStarted = 0
    /// Callers waiting for a round: the round they need, and whether to lead it.
    private var waiters: [(round: Int, continuation: CheckedContinuation<Bool, Never>)] = []
    /// Wakes the running service (``run()``), if it runs.
    private var wakeService: AsyncStream<Void>.Continuation?

    /// The client deliverers use unless given another: a refused connection fails the attempt at once (a pooled
    /// client's default is to keep trying until the attempt's timeout, which made every control action wait 10 s
    /// per notification while the receiver was down), and connecting may take at most 2 s. Lives as long as the
    /// process, like `HTTPClient.shared`.
    package static let sharedClient: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout.connect = .seconds(2)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    package init(simulator: Simulator, client: HTTPClient = NotificationDeliverer.sharedClient, logger: Logger, timeout: TimeAmount = .seconds(10)) {
        self.simulator = simulator
        self.client = client
        self.logger = logger
        self.timeout = timeout
    }

    /// Delivers every notification that is due now (in a round that begins after this call); returns how many
    /// attempts this call made itself (0 when another caller's round covered it).
    @discardableResult
    package func deliverDue() async -> Int {
        if delivering {
            let lead = await withCheckedContinuation { waiters.append((roundsStarted + 1, $0)) }
            guard lead else { return 0 }
        }
        delivering = true
        roundsStarted += 1
        let round = roundsStarted
        let attempts = await deliverRound()
        var waiting: [(round: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        for waiter in waiters {
            if waiter.round <= round { waiter.continuation.resume(returning: false) } else { waiting.append(waiter) }
        }
        waiters = waiting
        if waiters.isEmpty {
            delivering = false
        } else {
            waiters.removeFirst().continuation.resume(returning: true)
        }
        return attempts
    }

    /// Has what is due now delivered without waiting for it, when the service (``run()``) is running: it starts a
    /// round at once. Without the service, delivers as ``deliverDue()`` does.
    package func deliverSoon() async {
        guard let wakeService else {
            await deliverDue()
            return
        }
        wakeService.yield()
    }

    /// One round: every notification due now, posted in order (newest first with the reorder fault).
    private func deliverRound() async -> Int {
        guard let (due, urlText, faults, now) = await simulator.deliverySnapshot() else { return 0 }
        var batch = due
        if faults.reorderNotifications { batch.reverse() }
        var drop = faults.dropNextNotifications
        var duplicate = faults.duplicateNextNotifications
        for notification in batch {
            if faults.notificationDelayMilliseconds > 0 {
                try? await Task.sleep(for: .milliseconds(faults.notificationDelayMilliseconds))
            }
            let result: String
            if drop > 0 {
                drop -= 1
                result = "TIMED_OUT"
            } else {
                result = await post(notification.signedPayload, to: urlText)
                if duplicate > 0 {
                    duplicate -= 1
                    _ = await post(notification.signedPayload, to: urlText)
                }
            }
            logger.info(
                "notification delivery",
                metadata: [
                    "notification.uuid": .string(notification.notificationUUID),
                    "notification.type": .string(notification.notificationType.rawValue),
                    "result": .string(result),
                ]
            )
            await simulator.recordDelivery(notification.notificationUUID, result: result, at: now)
        }
        await simulator.finishRound(
            dropped: faults.dropNextNotifications - drop, duplicated: faults.duplicateNextNotifications - duplicate
        )
        return batch.count
    }

    /// Delivers due notifications every `interval` until the task is cancelled.
    package func run(every interval: Duration) async {
        while !Task.isCancelled {
            await deliverDue()
            try? await Task.sleep(for: interval)
        }
    }

    /// As a service, until graceful shutdown: delivers due notifications as soon as ``deliverSoon()`` asks, and five
    /// times a second besides.
    package func run() async throws {
        let (wakeups, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        wakeService = continuation
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { for await _ in wakeups { await self.deliverDue() } }
                group.addTask { await self.run(every: .milliseconds(200)) }
            }
        }
        wakeService = nil
        continuation.finish()
    }

    /// One POST; the `sendAttemptResult` it earns.
    private func post(_ signedPayload: String, to url: String) async -> String {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "App Store Simulator (Storekeeper)")
        let body = #"{"signedPayload":"\#(signedPayload)"}"#
        request.body = .bytes(ByteBuffer(string: body))
        do {
            let response = try await client.execute(request, timeout: timeout)
            _ = try? await response.body.collect(upTo: 1 << 16)
            return (200...206).contains(response.status.code) ? "SUCCESS" : "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            return "TIMED_OUT"
        } catch let error as HTTPClientError where error == .remoteConnectionClosed {
            return "PREMATURE_CLOSE"
        } catch {
            return "NO_RESPONSE"
        }
    }
}

extension Simulator {
    /// What a delivery round needs: the notifications due now (once committed: nothing is sent that a crash could
    /// lose), the URL, the faults, and the virtual time the attempts are dated at. `nil` when there is nothing to do.
    func deliverySnapshot() async -> (due: [NotificationRecord], url: String, faults: FaultConfiguration, now: Date)? {
        guard
            let snapshot = try? await read({ (engine) -> ([NotificationRecord], String, FaultConfiguration, Date)? in
                guard let url = engine.state.notificationURL else { return nil }
                let due = engine.dueNotifications()
                return due.isEmpty ? nil : (due, url, engine.state.faults, engine.state.now)
            })
        else { return nil }
        return snapshot
    }

    /// Records an attempt made at `date` at once (history shows it), without waiting for its commit: the round ends
    /// with one commit for all its attempts. An attempt lost in a crash before that commit is made again after the
    /// restart (a duplicate delivery, which receivers must accept from Apple too).
    func recordDelivery(_ uuid: String, result: String, at date: Date) {
        try? apply { (engine) throws(SimulatorError) in
            try engine.recordDeliveryAttempt(notificationUUID: uuid, result: result, at: date)
        }
    }

    /// Ends a round: uses up the notification faults it applied and commits its attempts.
    func finishRound(dropped: Int, duplicated: Int) async {
        if dropped > 0 || duplicated > 0 {
            try? apply { engine in
                engine.state.faults.dropNextNotifications = max(0, engine.state.faults.dropNextNotifications - dropped)
                engine.state.faults.duplicateNextNotifications = max(0, engine.state.faults.duplicateNextNotifications - duplicated)
            }
        }
        try? await commitApplied()
    }
}
