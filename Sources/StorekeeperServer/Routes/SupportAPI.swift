import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import StorekeeperCore
import StorekeeperHTTP

/// The support API, behind ``APIKeyAuthenticator`` for `support` keys (one app's, or every app's) and `admin` keys;
/// an app key gets 403. `GET /v1/support/search?q=…` finds customers by customer ID, transaction ID, original
/// transaction ID, app account token or order ID (``SupportSearch``); `GET /v1/support/customers/{id}` answers what support needs
/// to see of one customer: their state (the JSON of `GET /v1/customers/{id}`), their purchases as the ledger holds
/// them, and their timeline (the outbox's events, oldest first: every change of their state with its cause).
struct SupportAPI: Sendable {
    let configuration: ServerConfiguration
    let store: any LedgerStore
    let reader: CustomerReader<ByteBuffer>
    let now: @Sendable () -> Date
    /// The App Store Server API of each app and environment with credentials, for order IDs.
    let orderLookups: [VerifierKey: SupportSearch.OrderLookup]

    /// The most events a customer page shows (the latest ones); `GET /v1/events?customer=…` pages through all.
    static let timelineLimit = 500

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/search") { request, context in
            try await search(request, identity: try context.requireIdentity())
        }
        group.get("/customers/:customerId") { request, context in
            try await customer(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
    }

    /// The apps and environments a key supports: its app's, or every configured one.
    func apps(for identity: APIKeyIdentity) -> [VerifierKey] {
        configuration.apps.filter { identity.bundleId == nil || $0.bundleId == identity.bundleId }.flatMap { app in
            app.environments.map { VerifierKey(bundleId: app.bundleId, environment: $0) }
        }
    }

    func search(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["q"])
        guard let text = query.string("q")?.trimmingCharacters(in: .whitespaces), !text.isEmpty else {
            throw APIError(
                .badRequest, .invalidParameter,
                "give q: a customer ID, a transaction ID, an original transaction ID or an app account token")
        }
        guard text.utf8.count <= 128 else {
            throw APIError(.badRequest, .invalidParameter, "q is \(text.utf8.count) bytes: no ID searched here is longer than 128")
        }
        let found: SupportSearch.Result
        do {
            found = try await SupportSearch(store: store, apps: apps(for: identity), orderLookups: orderLookups).searchWithOrders(text)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be searched; retry")
        }
        if found.matches.isEmpty, !found.lookupFailures.isEmpty {
            throw APIError(.badGateway, .orderLookupFailed, "nothing found in the ledger, and " + found.lookupFailures.joined(separator: "; "))
        }
        guard !found.matches.isEmpty else {
            throw APIError(
                .notFound, .noMatch,
                "no customer of \(identity.bundleId ?? "any app") has the customer ID, transaction ID, original transaction ID, app account token or order ID \(UntrustedText.quoted(text, limit: 128))"
            )
        }
        struct Found: Encodable {
            var matches: [SupportMatch]
            /// Order look-ups that failed while others, or the ledger, answered.
            var warnings: [String]?
        }
        return StorekeeperApplication.jsonResponse(
            Found(matches: found.matches, warnings: found.lookupFailures.isEmpty ? nil : found.lookupFailures))
    }

    /// One customer as support sees them, in one app and environment (`bundleId` and `environment` as the customer
    /// routes take them); 404 when the app has no data for them.
    func customer(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let state: ByteBuffer
        switch await reader.read(customerId, bundleId: bundleId, environment: environment, now: now) {
        case .found(let body): state = body
        case .unknownCustomer:
            throw APIError(.notFound, .unknownCustomer, "no customer '\(customerId)' for \(bundleId) in \(environment)")
        case .storageFailure:
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        let ledger: Ledger
        var events: [LedgerEvent] = []
        do {
            ledger = try await store.ledger(for: customerId, bundleId: bundleId, environment: environment)
            let filter = EventFilter(bundleIds: [bundleId], environment: environment, customerId: customerId)
            var after: Int64 = 0
            while true {
                let page = try await store.events(after: after, limit: 200, filter: filter)
                events += page
                if events.count > Self.timelineLimit { events.removeFirst(events.count - Self.timelineLimit) }
                guard page.count == 200, let last = page.last else { break }
                after = last.position
            }
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        let purchases = ledger.transactions.values
            .filter { $0.info.bundleId == bundleId && ledger.customer(of: $0) == customerId }
            .sorted { ($0.info.purchaseDate, $0.info.transactionId) < ($1.info.purchaseDate, $1.info.transactionId) }
            .map { Purchase(source: $0.source, transaction: $0.info) }
        // Written as parts: the state and the events are JSON already (the customer read's, the events API's).
        var body = ByteBuffer(string: "{\"customer\":")
        body.writeImmutableBuffer(state)
        body.writeString(",\"events\":[")
        for (index, event) in events.enumerated() {
            if index > 0 { body.writeString(",") }
            body.writeImmutableBuffer(event.json())
        }
        body.writeString("],\"purchases\":")
        body.writeBytes((try? AppStoreJSON.makeEncoder().encode(purchases)) ?? Data("[]".utf8))
        body.writeString("}")
        return StorekeeperApplication.jsonResponse(encoded: body)
    }

    /// A purchase as the ledger holds it: the App Store's transaction and what delivered its latest version (a
    /// notification UUID, `app`, or the App Store Server API).
    struct Purchase: Encodable {
        var source: String
        var transaction: TransactionInfo
    }
}
