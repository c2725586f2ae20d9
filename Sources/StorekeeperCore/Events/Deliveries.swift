package import AppStoreModels
package import Foundation

/// Which events one webhook endpoint receives (from its configuration).
package struct WebhookRoute: Hashable, Sendable {
    /// The endpoint's name: its deliveries are kept under it.
    package var name: String
    /// `nil`: every app's, environment's, type's.
    package var bundleIds: Set<String>?
    package var environments: Set<AppStoreEnvironment>?
    package var types: Set<EventType>?

    package init(name: String, bundleIds: Set<String>? = nil, environments: Set<AppStoreEnvironment>? = nil, types: Set<EventType>? = nil) {
        self.name = name
        self.bundleIds = bundleIds
        self.environments = environments
        self.types = types
    }

    package func matches(_ event: LedgerEvent) -> Bool {
        (bundleIds?.contains(event.customer.bundleId) ?? true) && (environments?.contains(event.customer.environment) ?? true)
            && (types?.contains(event.type) ?? true)
    }
}

/// A delivery an instance has claimed: it alone sends it until `claimedUntil`.
package struct ClaimedDelivery: Hashable, Sendable {
    package var event: LedgerEvent
    /// Attempts made before this one.
    package var attempts: Int

    package init(event: LedgerEvent, attempts: Int) {
        self.event = event
        self.attempts = attempts
    }
}

/// One attempt to deliver an event, as recorded.
package struct DeliveryAttempt: Hashable, Sendable, Codable {
    package var attemptedAt: Date
    /// The HTTP status answered, if any.
    package var statusCode: Int?
    package var latencyMilliseconds: Int64
    /// Why it failed, when it did (a timeout, a refused connection, a status outside 2xx).
    package var error: String?
    /// The start of the answer's body (at most ``maximumExcerpt`` bytes, escaped).
    package var responseExcerpt: String?

    package static let maximumExcerpt = 512

    package init(attemptedAt: Date, statusCode: Int?, latencyMilliseconds: Int64, error: String?, responseExcerpt: String?) {
        self.attemptedAt = attemptedAt
        self.statusCode = statusCode
        self.latencyMilliseconds = latencyMilliseconds
        self.error = error
        self.responseExcerpt = responseExcerpt
    }

    package var succeeded: Bool { error == nil && (statusCode.map { (200..<300).contains($0) } ?? false) }
}

/// One attempt made, to record.
package struct FinishedAttempt: Sendable {
    package var position: Int64
    package var attempt: DeliveryAttempt
    package var outcome: DeliveryOutcome

    package init(position: Int64, attempt: DeliveryAttempt, outcome: DeliveryOutcome) {
        self.position = position
        self.attempt = attempt
        self.outcome = outcome
    }
}

/// What becomes of a delivery after an attempt.
package enum DeliveryOutcome: Hashable, Sendable {
    case delivered
    /// Failed; tried again at this date.
    case retry(at: Date)
    /// Failed for the last time: dead-lettered, and the endpoint marked failing.
    case deadLettered
}

/// A delivery's state (for `events show` and the admin routes).
package struct DeliveryRecord: Hashable, Sendable, Codable {
    package var endpoint: String
    /// `pending`, `delivered` or `dead`.
    package var status: String
    package var attempts: Int
    package var nextAttemptAt: Date?
    package var finishedAt: Date?
    package var history: [DeliveryAttempt]

    package init(endpoint: String, status: String, attempts: Int, nextAttemptAt: Date?, finishedAt: Date?, history: [DeliveryAttempt]) {
        self.endpoint = endpoint
        self.status = status
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.finishedAt = finishedAt
        self.history = history
    }
}

/// An endpoint's standing.
package struct EndpointStatus: Hashable, Sendable, Codable {
    package var name: String
    /// Events the endpoint has not received yet: its deliveries waiting (pending), and the events its route matches
    /// that were committed after its fan-out last looked (``notHandedOver``); when the oldest of them was created or
    /// committed.
    package var backlog: Int
    package var oldestPending: Date?
    package var deadLettered: Int
    /// Since when the endpoint is marked failing (a delivery was dead-lettered), and why; `nil` when it is not.
    package var failingSince: Date?
    package var failingReason: String?
    /// The part of ``backlog`` not handed to the endpoint yet (no delivery made): a second's worth while a server
    /// delivers, all that was committed since when none has run.
    package var notHandedOver: Int

    package init(
        name: String, backlog: Int, oldestPending: Date?, deadLettered: Int, failingSince: Date?, failingReason: String?, notHandedOver: Int = 0
    ) {
        self.name = name
        self.backlog = backlog
        self.oldestPending = oldestPending
        self.deadLettered = deadLettered
        self.failingSince = failingSince
        self.failingReason = failingReason
        self.notHandedOver = notHandedOver
    }
}

/// The deliveries of events to webhook endpoints, kept in the ledger so that every instance shares them: a delivery
/// is claimed through the database before it is sent (never sent by two instances at once), and a claim lapses, so
/// a killed instance's deliveries are taken over.
package protocol DeliveryStore: Sendable {
    /// Creates the deliveries of the events committed since the endpoint last looked (those its route matches), at
    /// most `limit` events; an endpoint seen for the first time starts after the last event committed (earlier ones
    /// are sent by a replay). Returns how many events it looked at, matched or not: fewer than `limit` once it has
    /// caught up (an endpoint whose route matches few events is not left behind by pages that hold none of them).
    func fanOut(_ route: WebhookRoute, limit: Int, now: Date) async throws(StorageError) -> Int

    /// Claims for `holder` until `now + lease` at most `limit` deliveries of the endpoint that are due and that are
    /// their customer's earliest pending one (a customer's events go in sequence: a later one waits behind an
    /// earlier one being retried), oldest first.
    func claimDeliveries(
        endpoint: String, holder: String, limit: Int, now: Date, lease: Duration
    ) async throws(StorageError) -> [ClaimedDelivery]

    /// Records attempts and what becomes of their deliveries, in one transaction (a claim not `holder`'s any more changes
    /// nothing but the attempt's record). `deadLettered` marks the endpoint failing; `delivered` clears the mark.
    func finishAttempts(endpoint: String, holder: String, _ attempts: [FinishedAttempt]) async throws(StorageError)

    /// Gives back `holder`'s claims of these deliveries, unattempted (a server stopping gracefully, its attempts
    /// interrupted or never started): due again at once, for whichever instance looks next, rather than when the
    /// claims would have lapsed.
    func releaseClaims(endpoint: String, holder: String, positions: [Int64]) async throws(StorageError)

    /// The endpoint's backlog (the events its route matches that it has not received), dead letters and failing mark.
    func endpointStatus(_ route: WebhookRoute) async throws(StorageError) -> EndpointStatus

    /// Clears the endpoint's failing mark and makes its pending deliveries due now (an operator's command).
    func resumeEndpoint(_ endpoint: String, now: Date) async throws(StorageError)

    /// Makes these events due at the endpoint from `now` (a delivery created, or made pending again whatever its state).
    func enqueue(_ events: [LedgerEvent], endpoint: String, now: Date) async throws(StorageError)

    /// The deliveries of one event, with every attempt.
    func deliveries(of position: Int64) async throws(StorageError) -> [DeliveryRecord]
}

extension DeliveryStore {
    /// The status (`endpointStatus(_:)` with a route) of an endpoint known by name, its route taken to match every event.
    package func endpointStatus(_ endpoint: String) async throws(StorageError) -> EndpointStatus {
        try await endpointStatus(WebhookRoute(name: endpoint))
    }
}

extension LedgerStore {
    /// Delivers again, from now, the events matching `filter` and `route` (dead-lettered, delivered, or never
    /// created for it, such as events before the endpoint existed); returns how many deliveries were made due.
    package func redeliver(_ route: WebhookRoute, filter: EventFilter, now: Date) async throws(StorageError) -> Int {
        var position: Int64 = 0
        var count = 0
        while true {
            let page = try await events(after: position, limit: 500, filter: filter)
            guard let last = page.last else { return count }
            position = last.position
            let matching = page.filter(route.matches)
            if !matching.isEmpty { try await enqueue(matching, endpoint: route.name, now: now) }
            count += matching.count
        }
    }
}
