import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import NIOCore
import ServiceLifecycle
import StorekeeperCore
import StorekeeperHTTP
import Synchronization

/// Polling for consumers that cannot receive webhooks: `GET /v1/events?after=CURSOR&limit=N[&customer=ID]
/// [&environment=…][&bundleId=…][&type=…][&wait=SECONDS]`, behind ``APIKeyAuthenticator``. An app key reads its own
/// app's events only; an admin key every app's (or the one `bundleId` names). `GET /v1/events/{id}` reads one.
///
/// The answer: `{"events": [...], "next": CURSOR, "hasMore": Bool}`, each event as webhooks carry it
/// (``LedgerEvent/json()``). `next` is opaque and stable: given as `after`, it answers the events committed after
/// the last one returned, however many instances write the ledger. With `wait`, a request that finds no event
/// waits up to that many seconds (at most 60) for one.
struct EventsAPI: Sendable {
    let configuration: ServerConfiguration
    let store: any LedgerStore
    /// Long polls waiting now: each holds a connection, so one key may hold an eighth of `http.maxConnections` and
    /// all keys together a quarter (the rest stay for Apple's notifications, the apps and health checks).
    let waits: WaitSlots
    let cursors: EventCursor.Keeper
    let logger: Logger

    init(configuration: ServerConfiguration, store: any LedgerStore, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.logger = logger
        cursors = EventCursor.Keeper(store: store)
        let total = max(1, configuration.http.maxConnections / 4)
        waits = WaitSlots(perKey: max(1, configuration.http.maxConnections / 8), total: total)
    }

    /// Counts the long polls waiting, per key and in all.
    final class WaitSlots: Sendable {
        let perKey: Int
        let total: Int
        private let held = Mutex<(byKey: [String: Int], all: Int)>(([:], 0))

        init(perKey: Int, total: Int) {
            self.perKey = perKey
            self.total = total
        }

        /// Takes a slot for `key`; false when the key or the server holds as many as it may.
        func take(_ key: String) -> Bool {
            held.withLock { held in
                guard held.all < total, held.byKey[key, default: 0] < perKey else { return false }
                held.all += 1
                held.byKey[key, default: 0] += 1
                return true
            }
        }

        func give(_ key: String) {
            held.withLock { held in
                held.all -= 1
                held.byKey[key, default: 1] -= 1
                if held.byKey[key] == 0 { held.byKey[key] = nil }
            }
        }
    }

    static let defaultLimit = 100
    static let maximumLimit = 1000
    static let maximumWait = 60

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/events") { request, context in
            try await list(request, identity: try context.requireIdentity())
        }
        group.get("/events/:eventId") { request, context in
            try await show(request, id: context.pathValue("eventId"), identity: try context.requireIdentity())
        }
    }

    /// The `type` parameter as an event type, or a 400 that names the nearest.
    static func eventType(_ name: String) throws(APIError) -> EventType {
        do throws(EventType.UnknownName) {
            return try EventType.named(name, field: "type")
        } catch {
            throw APIError(.badRequest, .invalidParameter, error.message)
        }
    }

    static func position(of cursor: String, _ cipher: EventCursor) throws(APIError) -> Int64 {
        guard let position = cipher.position(of: cursor) else {
            if cursor.hasPrefix("c1.") {
                // An earlier version's cursor, in the clear: it would probe other apps' volumes, so it is not taken.
                throw APIError(
                    .badRequest, .invalidCursor,
                    "after is a cursor of an earlier version (c1.), no longer taken: poll without after and skip the events you have by their id")
            }
            throw APIError(
                .badRequest, .invalidCursor, "after must be a cursor this server gave (\"next\"), not \(UntrustedText.quoted(cursor, limit: 64))")
        }
        return position
    }

    /// The ledger's cursor cipher, or 503 when the ledger cannot be read (logged: an unusable key fails every poll).
    func cipher() async throws(APIError) -> EventCursor {
        do {
            return try await cursors.cipher()
        } catch {
            logger.error("the polling cursors' key could not be read or made", metadata: ["error": .string(error.message)])
            throw APIError(.serviceUnavailable, .storageUnavailable, "the events could not be read")
        }
    }

    /// The apps a key reads events of: its own, or (admin) every configured app or the one asked for.
    func apps(for identity: APIKeyIdentity, asked: String?) throws(APIError) -> Set<String> {
        if identity.bundleId != nil || asked != nil {
            return [try CustomerAPI.app(for: identity, asked: asked, configuration.apps).bundleId]
        }
        return Set(configuration.apps.map(\.bundleId))
    }

    func list(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["after", "limit", "customer", "environment", "bundleId", "type", "wait"])
        var filter = EventFilter(bundleIds: try apps(for: identity, asked: query.string("bundleId")), environment: try query.environment())
        // An environment none of the apps read accepts is a mistake, named as the customer routes name it.
        if let environment = filter.environment,
            !configuration.apps.contains(where: { (filter.bundleIds?.contains($0.bundleId) ?? true) && $0.environments.contains(environment) })
        {
            throw APIError(
                .badRequest, .unknownEnvironment,
                "no app read here accepts environment \(environment.rawValue) (\((filter.bundleIds ?? []).sorted().joined(separator: ", ")))")
        }
        filter.customerId = try query.customerId()
        if let type = query.string("type") { filter.types = [try Self.eventType(type)] }
        let cipher = try await cipher()
        let after = try query.string("after").map { (cursor) throws(APIError) in try Self.position(of: cursor, cipher) } ?? 0
        let limit = try query.int("limit", in: 1...Self.maximumLimit) ?? Self.defaultLimit
        let wait = try query.int("wait", in: 0...Self.maximumWait) ?? 0
        if wait > 0 {
            guard waits.take(identity.name) else {
                throw APIError(
                    .tooManyRequests, .tooManyWaits,
                    "this key holds \(waits.perKey) waiting long polls already, or the server \(waits.total): poll without wait, or retry in a second",
                    headers: [.retryAfter: "1"])
            }
        }
        defer { if wait > 0 { waits.give(identity.name) } }
        // Answered before the server's response timeout cuts the request off (an empty page, the same cursor).
        let longest = max(0, configuration.http.responseTimeout - 2)
        let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(min(Double(wait), longest) * 1_000)))
        var events: [LedgerEvent]
        while true {
            let seen = store.eventsAppended.current
            do {
                events = try await store.events(after: after, limit: limit + 1, filter: filter)
            } catch {
                throw APIError(.serviceUnavailable, .storageUnavailable, "the events could not be read")
            }
            // A cursor past the last event committed is not one this server gave (a consumer holding it would wait forever).
            if events.isEmpty, after > 0, let last = try? await store.lastEventPosition(), after > last {
                throw APIError(.badRequest, .invalidCursor, "after is past the last event: give a cursor this server gave (\"next\")")
            }
            // A server stopping answers at once (its requests run in the server's graceful-shutdown context).
            guard events.isEmpty, ContinuousClock.now < deadline, !Task.isCancelled, !Task.isShuttingDownGracefully else { break }
            let left = ContinuousClock.now.duration(to: deadline)
            await store.eventsAppended.wait(after: seen, timeout: min(left, EventSignal.recheckInterval))
        }
        let hasMore = events.count > limit
        if hasMore { events.removeLast() }
        var out = ByteBuffer()
        out.writeString("{\"events\":[")
        for (index, event) in events.enumerated() {
            if index > 0 { out.writeString(",") }
            var json = event.json()
            out.writeBuffer(&json)
        }
        out.writeString("],\"hasMore\":\(hasMore),\"next\":\"\(cipher.cursor(events.last?.position ?? after))\"}")
        return StorekeeperApplication.jsonResponse(encoded: out)
    }

    func show(_ request: Request, id: String, identity: APIKeyIdentity) async throws -> Response {
        _ = try QueryParameters(request, allowed: [])
        let apps = try apps(for: identity, asked: nil)
        guard let eventId = EventID(id) else {
            throw APIError(.badRequest, .invalidParameter, "\(UntrustedText.quoted(id, limit: 64)) is not an event ID (\(EventID.shape))")
        }
        let event: LedgerEvent?
        do {
            event = try await store.event(eventId)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the event could not be read")
        }
        // Another app's event is as unknown to an app key as one that does not exist.
        guard let event, apps.contains(event.customer.bundleId) else { throw APIError(.notFound, .unknownEvent, "no event \(eventId)") }
        return StorekeeperApplication.jsonResponse(encoded: event.json())
    }
}
