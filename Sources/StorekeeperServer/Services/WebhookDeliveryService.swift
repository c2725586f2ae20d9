import AppStoreModels
import AppStoreServerAPI
import AsyncHTTPClient
import Foundation
package import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
package import StorekeeperCore
import StorekeeperHTTP
import Synchronization

/// Delivers the outbox's events to the configured webhook endpoints, as Standard Webhooks says: a `POST` of the
/// event's JSON with `webhook-id` (the event's ID: the receiver's deduplication key), `webhook-timestamp` (UNIX
/// seconds of the attempt) and `webhook-signature` (`v1,` and the HMAC-SHA256 of `id.timestamp.body` with each of the
/// endpoint's secrets); a 2xx within the timeout is success, anything else is tried again on the endpoint's schedule
/// with jitter, then dead-lettered.
///
/// Each endpoint has one loop per instance: it turns new events into deliveries (`DeliveryStore.fanOut(_:limit:now:)`),
/// claims due ones through the database (as many as `maxConcurrency` leaves free, each its customer's earliest pending
/// one, never one another instance holds), starts each send at once (one slow answer holds back no other customer's
/// event), and records every attempt. A claim lasts the timeout and a
/// margin (`claimMargin`); a killed instance's claims lapse and another instance takes them. So every event arrives at least once
/// (exactly once after deduplication by `webhook-id`), and a customer's events arrive in sequence order.
package struct WebhookDeliveryService: Service {
    let store: any LedgerStore
    let endpoints: [ServerConfiguration.WebhookEndpoint]
    let logger: Logger
    let metrics: StorekeeperMetrics
    /// Who claims (unique per process).
    let holder = "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))"
    /// How long a loop with nothing to do sleeps before it looks again (it wakes sooner when this instance commits).
    var idle: Duration = .milliseconds(500)
    /// How long a claim outlasts the attempt's timeout: an instance killed mid-delivery holds its claims this long after
    /// the timeout, then another instance (or the same server restarted) takes them.
    static let claimMargin = Duration.seconds(5)
    /// How many timeouts a claim lasts (and ``claimMargin``): its send starts at once and ends within one; the rest
    /// covers recording it late (a slow or retried transaction) without another instance taking it meanwhile.
    static let leaseTimeouts = 4
    /// The longest a send's outcome waits to be recorded with others' (its customer's next event waits for it).
    static let recordDelay = Duration.milliseconds(100)
    /// How often a loop with sends in flight claims more (and fans out first).
    static let claimInterval = Duration.milliseconds(25)
    /// How many events a fan-out looks at in one transaction; it goes on while a page comes back full.
    static let fanOutPage = 500
    /// How often a failing endpoint is tried (one delivery) while it stays failing (shorter in tests).
    package var failingProbe: Duration = .seconds(60)

    package init(store: any LedgerStore, endpoints: [ServerConfiguration.WebhookEndpoint], logger: Logger, metrics: StorekeeperMetrics) {
        self.store = store
        self.endpoints = endpoints
        self.logger = logger
        self.metrics = metrics
    }

    /// Gives each endpoint new to the ledger its place in the outbox (after the last event committed), so that the
    /// events committed from now on reach it; run before the server takes requests.
    package static func register(_ endpoints: [ServerConfiguration.WebhookEndpoint], in store: any LedgerStore) async throws(StorageError) {
        for endpoint in endpoints { _ = try await store.fanOut(endpoint.route, limit: 0, now: Date()) }
    }

    package func run() async throws {
        guard !endpoints.isEmpty else { return }
        // As many connections to a host as the endpoints on it may have requests in flight (AsyncHTTPClient's default
        // of 8 would queue the rest, and their deadlines would pass in the queue: failed attempts never sent).
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(8, endpoints.map(\.maxConcurrency).reduce(0, +))
        // A refused connection is an attempt that failed, at once: not tried again until the attempt's deadline (it
        // held a slot for the whole timeout and recorded the timeout as its latency).
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for endpoint in endpoints {
                    group.addTask { await deliverForever(to: endpoint, client: client) }
                }
            }
        }
        try? await client.shutdown()
    }

    /// What wakes an endpoint's loop: a send that ended (`nil`: cut short by the server stopping), or its ticker (a
    /// commit of this instance, or the time to look again).
    enum Wake: Sendable {
        case ended(position: Int64, FinishedAttempt?)
        case tick
    }

    func deliverForever(to endpoint: ServerConfiguration.WebhookEndpoint, client: HTTPClient) async {
        let route = endpoint.route
        let secrets = endpoint.secrets
        let timeout = Duration.milliseconds(Int64(endpoint.timeoutSeconds * 1_000))
        let slots = endpoint.maxConcurrency
        var lastStanding = ContinuousClock.now.advanced(by: .seconds(-60))
        var lastProbe = ContinuousClock.now.advanced(by: .seconds(-3_600))
        var loggedFailure = false
        // Whether the endpoint is marked failing: read with its standing, and known at once from this loop's own
        // attempts (a dead letter marks it, a success clears it).
        var failing = false
        var fannedOut: UInt64? = nil
        var lastFanOut = ContinuousClock.now
        var lastClaim = ContinuousClock.now.advanced(by: .seconds(-60))
        var behind = false
        var claimedAfter: UInt64? = nil
        // Sends run side by side, each started as soon as one of the `slots` is free: one slow answer holds back no
        // other customer's event. Claims come a few rounds ahead (`queue`, refilled when less than a round is left),
        // and what the sends come to is recorded several at a time (`unrecorded`): a transaction a round, not a send.
        var inFlight = 0
        var queue: [ClaimedDelivery] = []
        var unrecorded: [(position: Int64, attempt: FinishedAttempt?)] = []
        var unrecordedSince: ContinuousClock.Instant?
        await withTaskGroup(of: Wake.self) { group in
            var ticking = false
            func handle(_ wake: Wake) {
                switch wake {
                case .ended(let position, let attempt):
                    inFlight -= 1
                    unrecorded.append((position, attempt))
                    if unrecordedSince == nil { unrecordedSince = .now }
                case .tick:
                    ticking = false
                }
            }
            while !Task.isCancelled {
                let seen = store.eventsAppended.current
                // Recorded once nothing is in flight, a round of slots has ended, or the first ended a moment ago (a
                // customer's next event waits for its last one to be recorded).
                if let since = unrecordedSince, inFlight == 0 || unrecorded.count >= slots || ContinuousClock.now - since >= Self.recordDelay {
                    failing = await record(unrecorded, endpoint: endpoint.name, failing: failing)
                    unrecorded = []
                    unrecordedSince = nil
                }
                do throws(StorageError) {
                    // Every 5 seconds; at every wake while the endpoint is failing (an operator's resume, on this
                    // instance or another, is seen at once or at the next look).
                    if failing || ContinuousClock.now - lastStanding > .seconds(5) {
                        let standing = try await store.endpointStatus(route)
                        lastStanding = .now
                        failing = standing.failingSince != nil
                        metrics.webhookStanding(
                            endpoint: endpoint.name, backlog: standing.backlog,
                            oldestSeconds: standing.oldestPending.map { max(0, Date().timeIntervalSince($0)) } ?? 0,
                            deadLetters: standing.deadLettered)
                    }
                    // More is claimed when the queue runs low and there may be more: the last claim got a round or more
                    // (a backlog), this instance committed since, or the idle time passed (retries coming due, other
                    // instances' events). While sends are in flight, at most every `claimInterval` unless behind: a
                    // fan-out and a claim are writes (on SQLite, taken from the ingestion's writer).
                    let mayBeMore = behind || seen != claimedAfter || ContinuousClock.now - lastClaim >= idle
                    if queue.count < slots, mayBeMore, inFlight == 0 || behind || ContinuousClock.now - lastClaim >= Self.claimInterval {
                        lastClaim = .now
                        claimedAfter = seen
                        // A fan-out only when this instance committed since the last look, or a second has passed
                        // (another instance's commits).
                        if seen != fannedOut || ContinuousClock.now - lastFanOut >= .seconds(1) {
                            while try await store.fanOut(route, limit: Self.fanOutPage, now: Date()) == Self.fanOutPage {}
                            fannedOut = seen
                            lastFanOut = .now
                        }
                        // Up to the lease's rounds ahead: fewer claims (each a commit) per send; the last one claimed
                        // starts within its lease (the rounds before it take a timeout at most each).
                        var limit = Self.leaseTimeouts * slots - inFlight - queue.count
                        if failing {
                            // A failing endpoint gets one delivery now and then, until one succeeds (or an operator resumes it).
                            limit = inFlight == 0 && queue.isEmpty && ContinuousClock.now - lastProbe >= failingProbe ? 1 : 0
                            if limit == 1 { lastProbe = .now }
                        }
                        if limit > 0 {
                            let more = try await store.claimDeliveries(
                                endpoint: endpoint.name, holder: holder, limit: limit, now: Date(),
                                lease: timeout * Self.leaseTimeouts + Self.claimMargin)
                            queue += more
                            behind = more.count >= slots
                        } else {
                            behind = false
                        }
                    }
                    loggedFailure = false
                } catch {
                    if !loggedFailure {
                        logger.error(
                            "webhook deliveries could not be read or claimed; trying again",
                            metadata: ["webhook.endpoint": .string(endpoint.name), "error": .string(error.message)])
                        loggedFailure = true
                    }
                }
                while inFlight < slots, !queue.isEmpty {
                    let delivery = queue.removeFirst()
                    inFlight += 1
                    let probing = failing
                    group.addTask {
                        .ended(
                            position: delivery.event.position,
                            await deliver(delivery, to: endpoint, secrets: secrets, timeout: timeout, client: client, probing: probing))
                    }
                }
                if !ticking {
                    // Wakes the loop on a commit of this instance or when it is time to look again (for another
                    // instance's commits, the standing, a failing endpoint's probe, or what waits to be recorded).
                    var wait = failing ? min(idle * 4, failingProbe) : idle
                    if inFlight > 0 { wait = min(wait, Self.claimInterval) }
                    if unrecordedSince != nil { wait = min(wait, Self.recordDelay) }
                    let signal = store.eventsAppended
                    ticking = true
                    group.addTask {
                        await signal.wait(after: seen, timeout: wait)
                        return .tick
                    }
                }
                guard let wake = await group.next() else { break }
                handle(wake)
            }
            // Stopping: every send ends (answered, or cut short by the cancellation).
            for await wake in group { handle(wake) }
        }
        // Recorded, with the claims never started given back.
        let done = unrecorded + queue.map { (position: $0.event.position, attempt: FinishedAttempt?.none) }
        if !done.isEmpty { _ = await record(done, endpoint: endpoint.name, failing: failing) }
    }

    /// Records sends that ended: their attempts in one transaction, and (only when the server is stopping) the claims
    /// of those cut short or never started given back in another, so that the next server sends them at once rather
    /// than when the claims lapse. Recorded even when the service is stopping (from a task of its own: a store refuses
    /// work for a cancelled task), so that what was delivered is not sent again by whoever takes the claims over.
    /// Returns whether the endpoint is failing now.
    func record(_ done: [(position: Int64, attempt: FinishedAttempt?)], endpoint name: String, failing: Bool) async -> Bool {
        let finished = done.compactMap(\.attempt)
        let unattempted = done.filter { $0.attempt == nil }.map(\.position).sorted()
        let (store, holder) = (store, holder)
        let failure = await Task { () -> StorageError? in
            do {
                try await store.finishAttempts(endpoint: name, holder: holder, finished)
                try await store.releaseClaims(endpoint: name, holder: holder, positions: unattempted)
                return nil
            } catch {
                return error as? StorageError ?? StorageError("\(error)")
            }
        }.value
        if let failure {
            // The claims lapse and the deliveries are tried again (at least once, never lost).
            logger.error(
                "delivery attempts could not be recorded; they are tried again when their claims lapse",
                metadata: ["webhook.endpoint": .string(name), "error": .string(failure.message)])
        }
        if finished.contains(where: { $0.outcome == .delivered }) { return false }
        if finished.contains(where: { $0.outcome == .deadLettered }) { return true }
        return failing
    }

    /// One attempt, and what becomes of the delivery (recorded with the batch's); `nil` when the server stopped
    /// while the attempt was on its way, before any answer: the receiver did nothing wrong, so no attempt is counted,
    /// and the delivery is taken up again when its claim lapses. An answer that came is recorded, whatever it was.
    /// `probing`: the endpoint was marked failing when the delivery was claimed (a probe: one delivery now and then).
    func deliver(
        _ delivery: ClaimedDelivery, to endpoint: ServerConfiguration.WebhookEndpoint, secrets: [WebhookSecret], timeout: Duration,
        client: HTTPClient,
        probing: Bool = false
    ) async -> FinishedAttempt? {
        let event = delivery.event
        let attempt = await Self.send(event, to: endpoint.url, secrets: secrets, timeout: timeout, client: client)
        if attempt.statusCode == nil, Task.isCancelled || Task.isShuttingDownGracefully {
            logger.info(
                "event delivery interrupted by the server stopping; not counted as an attempt",
                metadata: ["webhook.endpoint": .string(endpoint.name), "event.id": .string(event.id.description)])
            return nil
        }
        let outcome: DeliveryOutcome
        let attemptNumber = delivery.attempts + 1
        if attempt.succeeded {
            outcome = .delivered
        } else if attemptNumber > endpoint.retryScheduleSeconds.count {
            outcome = .deadLettered
        } else {
            // Jitter only lengthens a wait, so the schedule's whole span (over 24 hours by default) is the least it takes.
            let wait = endpoint.retryScheduleSeconds[attemptNumber - 1] * Double.random(in: 1...1.2)
            outcome = .retry(at: Date().addingTimeInterval(wait))
        }
        let label: String
        switch outcome {
        case .delivered: label = "delivered"
        case .retry: label = "failed"
        case .deadLettered: label = "dead_lettered"
        }
        metrics.webhookAttempt(endpoint: endpoint.name, outcome: label)
        var metadata: Logger.Metadata = [
            "webhook.endpoint": .string(endpoint.name), "event.id": .string(event.id.description), "event.type": .string(event.type.rawValue),
            "webhook.attempt": .stringConvertible(attemptNumber), "webhook.latency_ms": .stringConvertible(attempt.latencyMilliseconds),
        ]
        if let status = attempt.statusCode { metadata["http.response.status_code"] = .stringConvertible(status) }
        if let error = attempt.error { metadata["error"] = .string(error) }
        switch outcome {
        case .delivered: logger.debug("event delivered", metadata: metadata)
        case .retry(let at) where probing:
            // The schedule's time is only the earliest: a failing endpoint gets one delivery a probe interval.
            metadata["webhook.next_attempt"] = .string(LedgerEvent.timestamp(at))
            metadata["webhook.probe_interval_ms"] = .stringConvertible(Int(failingProbe / .milliseconds(1)))
            logger.info(
                """
                event delivery failed while the endpoint is marked failing; it is tried again no earlier than webhook.next_attempt, \
                when a probe (one delivery every webhook.probe_interval_ms) takes it, or when an operator resumes the endpoint
                """,
                metadata: metadata)
        case .retry(let at):
            metadata["webhook.next_attempt"] = .string(LedgerEvent.timestamp(at))
            logger.info("event delivery failed; it is tried again", metadata: metadata)
        case .deadLettered:
            logger.error("event delivery failed for the last time: dead-lettered, and the endpoint marked failing", metadata: metadata)
        }
        return FinishedAttempt(position: event.position, attempt: attempt, outcome: outcome)
    }

    /// Sends an event once: the signed `POST`, what came of it.
    static func send(_ event: LedgerEvent, to url: String, secrets: [WebhookSecret], timeout: Duration, client: HTTPClient) async -> DeliveryAttempt {
        let body = event.json()
        let started = ContinuousClock.now
        let attemptedAt = Date()
        let timestamp = Int64(attemptedAt.timeIntervalSince1970)
        let id = event.id.description
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "Storekeeper-Webhooks/1")
        for header in WebhookSignature(id: id, timestamp: timestamp, body: Array(body.readableBytesView), secrets: secrets).headers {
            request.headers.add(name: header.name, value: header.value)
        }
        request.body = .bytes(body)
        func elapsed() -> Int64 { Int64((ContinuousClock.now - started) / .milliseconds(1)) }
        do {
            let deadline = NIODeadline.now() + .nanoseconds(timeout.nanosecondsClamped)
            let response = try await client.execute(request, deadline: deadline)
            // The whole answer within the timeout, its body too: a receiver that sends its status and then stalls has not
            // answered. Its first bytes are kept for the record; past 1 MiB the rest is not read (the status decides).
            let (head, keptBytes, read) = try await Self.within(deadline) {
                var kept: [UInt8] = []
                var read = 0
                for try await chunk in response.body {
                    if kept.count < DeliveryAttempt.maximumExcerpt {
                        kept += chunk.readableBytesView.prefix(DeliveryAttempt.maximumExcerpt - kept.count)
                    }
                    read += chunk.readableBytes
                    if read > Self.longestBodyRead { break }
                }
                return (String(decoding: kept, as: UTF8.self), kept.count, read)
            }
            let status = Int(response.status.code)
            // The kept bytes escaped whole (an escape is at most 6 characters a byte), then what the excerpt leaves out
            // of the body, counted in the body's bytes (past 1 MiB the rest was not read).
            var shown = head.isEmpty ? nil : UntrustedText.escaped(head, limit: DeliveryAttempt.maximumExcerpt * 6)
            if read > keptBytes, let excerpt = shown {
                shown =
                    excerpt
                    + "…(\(read > Self.longestBodyRead ? "over 1 MiB, " : "")\(read - keptBytes)\(read > Self.longestBodyRead ? "+" : "") more bytes)"
            }
            return DeliveryAttempt(
                attemptedAt: attemptedAt, statusCode: status, latencyMilliseconds: elapsed(),
                error: (200..<300).contains(status) ? nil : "HTTP \(status)", responseExcerpt: shown)
        } catch {
            return DeliveryAttempt(
                attemptedAt: attemptedAt, statusCode: nil, latencyMilliseconds: elapsed(), error: AppStoreServerAPIClient.describe(error),
                responseExcerpt: nil)
        }
    }

    /// How much of an answer's body is read (to see the answer end within the timeout) before the rest is left unread.
    static let longestBodyRead = 1 << 20

    /// `body`'s result, or `HTTPClientError.deadlineExceeded` when `deadline` passes first.
    static func within<T: Sendable>(_ deadline: NIODeadline, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                let left = deadline - NIODeadline.now()
                if left > .zero { try await Task.sleep(nanoseconds: UInt64(left.nanoseconds)) }
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw HTTPClientError.deadlineExceeded }
            return value
        }
    }
}

extension Duration {
    /// Whole nanoseconds, saturating.
    var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : product + attoseconds / 1_000_000_000
    }
}
