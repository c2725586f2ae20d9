import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import NIOCore
import StorekeeperCore
import StorekeeperHTTP

/// The webhook deliveries' admin routes (admin keys only), the same operations as `storekeeper events`:
/// `GET /v1/admin/webhooks` (each endpoint's backlog, dead letters and failing mark),
/// `POST /v1/admin/webhooks/{name}/resume`, `POST /v1/admin/webhooks/{name}/replay?since=DATE[&customer=…][&type=…]`,
/// `POST /v1/admin/webhooks/{name}/redeliver?event=evt_…`, and `GET /v1/admin/events/{id}` (an event with its
/// deliveries and every attempt).
struct WebhookAdminAPI: Sendable {
    let configuration: ServerConfiguration
    let store: any LedgerStore

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/admin/webhooks") { request, context in
            try Self.requireAdmin(context)
            _ = try QueryParameters(request, allowed: [])
            var statuses: [EndpointStatus] = []
            for endpoint in configuration.webhooks { statuses.append(try await storage { try await store.endpointStatus(endpoint.route) }) }
            return StorekeeperApplication.jsonResponse(["endpoints": statuses])
        }
        group.post("/admin/webhooks/:name/resume") { request, context in
            try Self.requireAdmin(context)
            _ = try QueryParameters(request, allowed: [])
            let endpoint = try self.endpoint(context)
            try await storage { try await store.resumeEndpoint(endpoint.name, now: Date()) }
            return StorekeeperApplication.jsonResponse(try await storage { try await store.endpointStatus(endpoint.route) })
        }
        group.post("/admin/webhooks/:name/replay") { request, context in
            try Self.requireAdmin(context)
            let query = try QueryParameters(request, allowed: ["since", "customer", "type", "bundleId"])
            let endpoint = try self.endpoint(context)
            guard let sinceText = query.string("since") else {
                throw APIError(.badRequest, .invalidParameter, "since is required: the ISO-8601 date from which to replay")
            }
            guard let since = (try? Date(sinceText, strategy: .iso8601)) ?? (try? Date(sinceText + "T00:00:00Z", strategy: .iso8601)) else {
                throw APIError(
                    .badRequest, .invalidParameter, "since must be an ISO-8601 date or day, not \(UntrustedText.quoted(sinceText, limit: 64))")
            }
            var filter = EventFilter(customerId: try query.customerId(), since: since)
            if let type = query.string("type") { filter.types = [try EventsAPI.eventType(type)] }
            if let bundleId = query.string("bundleId") {
                guard configuration.apps.contains(where: { $0.bundleId == bundleId }) else {
                    throw APIError(.badRequest, .unknownApp, "no app \(UntrustedText.quoted(bundleId, limit: 128)) is configured on this server")
                }
                filter.bundleIds = [bundleId]
            }
            let count = try await storage { try await store.redeliver(endpoint.route, filter: filter, now: Date()) }
            return StorekeeperApplication.jsonResponse(RedeliveryAnswer(endpoint: endpoint.name, replayed: count))
        }
        group.post("/admin/webhooks/:name/redeliver") { request, context in
            try Self.requireAdmin(context)
            let query = try QueryParameters(request, allowed: ["event"])
            let endpoint = try self.endpoint(context)
            guard let eventId = query.string("event") else {
                throw APIError(.badRequest, .invalidParameter, "event is required: the ID of the event to deliver again (evt_…)")
            }
            let event = try await self.event(eventId)
            guard endpoint.route.matches(event) else {
                throw APIError(
                    .badRequest, .invalidParameter,
                    "endpoint '\(endpoint.name)' does not take event \(event.id) (its apps, environments or eventTypes leave it out)")
            }
            try await storage { try await store.enqueue([event], endpoint: endpoint.name, now: Date()) }
            return StorekeeperApplication.jsonResponse(RedeliveryAnswer(endpoint: endpoint.name, redelivered: 1, events: [event.id.description]))
        }
        group.get("/admin/events/:eventId") { request, context in
            try Self.requireAdmin(context)
            _ = try QueryParameters(request, allowed: [])
            let event = try await self.event(context.pathValue("eventId"))
            let deliveries = try await storage { try await store.deliveries(of: event.position) }
            var out = ByteBuffer(string: "{\"deliveries\":")
            out.writeBytes((try? AppStoreJSON.makeEncoder().encode(deliveries)) ?? Data("[]".utf8))
            out.writeString(",\"event\":")
            var json = event.json()
            out.writeBuffer(&json)
            out.writeString("}")
            return StorekeeperApplication.jsonResponse(encoded: out)
        }
    }

    static func requireAdmin(_ context: StorekeeperRequestContext) throws {
        guard try context.requireIdentity().isAdmin else { throw APIError(.forbidden, .adminOnly, "this route takes an admin API key") }
    }

    func endpoint(_ context: StorekeeperRequestContext) throws(APIError) -> ServerConfiguration.WebhookEndpoint {
        let name = context.pathValue("name")
        guard let endpoint = configuration.webhooks.first(where: { $0.name == name }) else {
            throw APIError(.notFound, .unknownEndpoint, "no webhook endpoint \(UntrustedText.quoted(name, limit: 64)) is configured")
        }
        return endpoint
    }

    func event(_ text: String) async throws -> LedgerEvent {
        guard let id = EventID(text) else {
            throw APIError(.badRequest, .invalidParameter, "\(UntrustedText.quoted(text, limit: 64)) is not an event ID (\(EventID.shape))")
        }
        guard let event = try await storage({ try await store.event(id) }) else { throw APIError(.notFound, .unknownEvent, "no event \(id)") }
        return event
    }

    func storage<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as StorageError {
            _ = error
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read or written; retry")
        }
    }
}

/// What a redelivery or a replay answers, the admin routes and `storekeeper events redeliver|replay` alike:
/// `{endpoint, redelivered, events}` (how many were made due, and which) or `{endpoint, replayed}`.
package struct RedeliveryAnswer: Encodable, Sendable {
    package var endpoint: String
    package var redelivered: Int?
    package var replayed: Int?
    package var events: [String]?

    package init(endpoint: String, redelivered: Int? = nil, replayed: Int? = nil, events: [String]? = nil) {
        self.endpoint = endpoint
        self.redelivered = redelivered
        self.replayed = replayed
        self.events = events
    }
}
