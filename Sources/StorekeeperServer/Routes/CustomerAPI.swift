import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import HummingbirdAuth
import StorekeeperCore
import StorekeeperHTTP

/// Whether `id` is a customer ID as every route and command takes one: 1-128 ASCII letters, digits and `-_.@:`.
package func isCustomerId(_ id: String) -> Bool { CustomerAPI.validCustomerId(id) }

/// The app API, behind ``APIKeyAuthenticator`` (keys with scope `app` act for one app, `admin` keys for any):
/// `POST /v1/customers/{id}/transactions` with `{"signedTransaction"}` (``TransactionSubmitter``) and
/// `GET /v1/customers/{id}` (``CustomerReader``). The handlers parse the request, call one use case and map its
/// outcome to a status; the answer's JSON is ``CustomerAnswer/json()``.
struct CustomerAPI: Sendable {
    let configuration: ServerConfiguration
    let submitter: TransactionSubmitter
    let reader: CustomerReader<ByteBuffer>
    let now: @Sendable () -> Date

    /// `{"signedTransaction": "<JWS>"}`, read strictly (``StrictJSONDecoder``): a repeated key, a trailing comma or an
    /// unknown key is refused, naming it, rather than read one way here and another elsewhere.
    struct SubmitBody: Decodable { var signedTransaction: String }

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.post("/customers/:customerId/transactions") { request, context in
            try await submit(request, customerId: try Self.customerId(context), identity: try context.requireIdentity())
        }
        group.post("/customers/:customerId/app-account-token") { request, context in
            try await issueToken(request, customerId: try Self.customerId(context), identity: try context.requireIdentity())
        }
        group.get("/customers/:customerId") { request, context in
            try await read(request, customerId: try Self.customerId(context), identity: try context.requireIdentity())
        }
        group.put("/customers/:customerId/consumption-consent") { request, context in
            try await consent(request, customerId: try Self.customerId(context), identity: try context.requireIdentity())
        }
        group.delete("/customers/:customerId") { request, context in
            try await erase(request, customerId: try Self.customerId(context), identity: try context.requireIdentity())
        }
    }

    /// The path's customer ID, percent-decoded (`a%40b` and `a@b` are the same customer, whichever way a client
    /// encodes the path), and valid: 1-128 ASCII letters, digits and `-_.@:`. A malformed escape is kept as it came,
    /// and then refused as an invalid ID.
    static func customerId(_ context: StorekeeperRequestContext) throws(APIError) -> String {
        let id = context.pathValue("customerId")
        guard validCustomerId(id) else {
            // Cut with the mark every cut value carries: `…(65 more bytes)`.
            let shown = UntrustedText.escaped(id, limit: 64)
            throw APIError(
                .badRequest, .invalidCustomerId, "customer ID '\(shown)' is not valid: customer IDs are 1-128 ASCII letters, digits and -_.@:"
            )
        }
        return id
    }

    static func validCustomerId(_ id: String) -> Bool {
        // Byte by byte: this runs on every request, cache hits included.
        (1...128).contains(id.utf8.count)
            && id.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
                case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "@"), UInt8(ascii: ":"): true
                default: false
                }
            }
    }

    func submit(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        _ = try QueryParameters(request, allowed: [])
        let buffer = try await StorekeeperApplication.readBody(request)
        let jws: String
        do {
            jws = try StrictJSONDecoder.decode(SubmitBody.self, from: Array(buffer.readableBytesView), file: "the body").signedTransaction
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                #"the body must be JSON {"signedTransaction": "<JWS>"}: "#
                    + UntrustedText.escaped(error.message, limit: StrictJSONDecoder.answerLimit)
            )
        }
        guard !jws.isEmpty else { throw APIError(.badRequest, .malformedBody, #"the body must be JSON {"signedTransaction": "<JWS>"}: it is empty"#) }
        switch await submitter.submit(jws, customerId: customerId, forApp: identity.bundleId) {
        case .linked(let verified):
            return try await answer(customerId, bundleId: verified.payload.bundleId, environment: verified.payload.environment ?? .production)
        case .refused(let conflict):
            throw APIError(.conflict, .init(rawValue: conflict.code), conflict.message)
        case .rejected(let rejection):
            throw APIError(rejection.kind == .forbidden ? .forbidden : .badRequest, .init(rawValue: rejection.code), rejection.message)
        case .storageFailure:
            throw APIError(.serviceUnavailable, .storageUnavailable, "the transaction could not be stored; retry")
        }
    }

    /// `POST /v1/customers/{id}/app-account-token[?renew=true]`: the token the app passes to StoreKit for this
    /// customer, issued by the server and the same on every call until renewed.
    func issueToken(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["environment", "bundleId", "renew"])
        let body = try await StorekeeperApplication.readBody(request)
        guard body.readableBytes == 0 else {
            throw APIError(.badRequest, .malformedBody, "this route takes no body (its options are query parameters: renew, bundleId, environment)")
        }
        // Issuing a token is a write: a one-app key that names another app is refused, not given its own app's token.
        let (bundleId, environment) = try Self.writeScope(of: query, identity: identity, configuration.apps)
        let renew = try query.bool("renew") ?? false
        let token: LowercaseUUID
        do {
            token = try await reader.store.appAccountToken(for: customerId, bundleId: bundleId, environment: environment, renew: renew)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the token could not be issued; retry")
        }
        struct Issued: Encodable {
            var customerId: String
            var bundleId: String
            var environment: String
            var appAccountToken: String
        }
        return StorekeeperApplication.jsonResponse(
            Issued(customerId: customerId, bundleId: bundleId, environment: environment.rawValue, appAccountToken: token.description))
    }

    /// `DELETE /v1/customers/{id}[?bundleId=…&environment=…]` (admin keys only): erases the customer's identity in one
    /// app and environment (``CustomerErasure``), with a `customer.erased` event; 404 when the app has no data for them.
    func erase(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        guard identity.isAdmin else { throw APIError(.forbidden, .adminOnly, "erasing a customer takes an admin API key") }
        let query = try QueryParameters(request, allowed: ["environment", "bundleId"])
        let body = try await StorekeeperApplication.readBody(request)
        guard body.readableBytes == 0 else {
            throw APIError(.badRequest, .malformedBody, "this route takes no body (bundleId and environment are query parameters)")
        }
        let (bundleId, environment) = try scope(of: query, identity: identity)
        let erased: CustomerErasure?
        do {
            erased = try await reader.store.erase(CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId))
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the customer could not be erased; retry")
        }
        guard let erased else { throw APIError(.notFound, .unknownCustomer, "no customer '\(customerId)' for \(bundleId) in \(environment)") }
        // In the audit log too: who erased whom, and when (the actions before it are the erased identity's, whatever
        // events retention drops later).
        _ = try? await reader.store.recordSupportAction(
            SupportAction(
                at: now(), keyName: identity.name, customer: CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId),
                action: SupportAction.Kind.eraseCustomer.rawValue, target: nil, request: [:], outcome: "done",
                detail: ["eventId": .string(erased.eventId)]))
        return StorekeeperApplication.jsonResponse(erased)
    }

    /// The app and environment a request is for (``app(for:asked:_:)``; the environment given, or production when the
    /// app accepts it, else sandbox), or the error naming what is wrong.
    func scope(of query: QueryParameters, identity: APIKeyIdentity) throws -> (bundleId: String, environment: AppStoreEnvironment) {
        try Self.scope(of: query, identity: identity, configuration.apps)
    }

    /// ``scope(of:identity:_:)`` for a route that changes something: a one-app key that names another app is refused
    /// (403 `other-app`) rather than acting on its own app, which a read may do but a write must not.
    static func writeScope(
        of query: QueryParameters, identity: APIKeyIdentity, _ apps: [ServerConfiguration.App]
    ) throws -> (bundleId: String, environment: AppStoreEnvironment) {
        try refuseOtherApp(identity, asked: query.string("bundleId"))
        return try scope(of: query, identity: identity, apps)
    }

    /// 403 `other-app` when a one-app key's request names another app.
    static func refuseOtherApp(_ identity: APIKeyIdentity, asked: String?) throws(APIError) {
        guard let own = identity.bundleId, let asked, !asked.isEmpty, asked != own else { return }
        throw APIError(
            .forbidden, .otherApp,
            "this key acts for \(UntrustedText.quoted(own, limit: 128)) only, not for \(UntrustedText.quoted(asked, limit: 128)): leave out bundleId or use a key of that app"
        )
    }

    static func scope(
        of query: QueryParameters, identity: APIKeyIdentity, _ apps: [ServerConfiguration.App]
    ) throws -> (bundleId: String, environment: AppStoreEnvironment) {
        let app = try Self.app(for: identity, asked: query.string("bundleId"), apps)
        let environment = try query.environment() ?? app.defaultEnvironment
        guard app.environments.contains(environment) else {
            throw APIError(
                .badRequest, .unknownEnvironment,
                "app '\(app.bundleId)' does not accept environment \(UntrustedText.quoted(environment.rawValue, limit: 64))"
            )
        }
        return (app.bundleId, environment)
    }

    func read(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["environment", "bundleId"])
        let app = try Self.app(for: identity, asked: query.string("bundleId"), configuration.apps)
        let bundleId = app.bundleId
        let requested = try query.environment()
        let environment = requested ?? app.defaultEnvironment
        guard app.environments.contains(environment) else {
            throw APIError(
                .badRequest, .unknownEnvironment,
                "app '\(bundleId)' does not accept environment \(UntrustedText.quoted(environment.rawValue, limit: 64))"
            )
        }
        return try await answer(customerId, bundleId: bundleId, environment: environment)
    }

    /// The app a read is for: an app key's own (a `bundleId` parameter is not needed); for an admin key, the
    /// `bundleId` parameter's, which must name a configured app, or the only app when one is configured. An admin
    /// key's read without it on a server of several apps is refused, naming them, rather than read from one of them.
    static func app(for identity: APIKeyIdentity, asked: String?, _ apps: [ServerConfiguration.App]) throws(APIError) -> ServerConfiguration.App {
        if let own = identity.bundleId {
            // An app key reads its own app or nothing: never the one its request names.
            guard let app = apps.first(where: { $0.bundleId == own }) else {
                throw APIError(.forbidden, .unknownApp, "this key's app \(UntrustedText.quoted(own, limit: 128)) is not configured on this server")
            }
            return app
        }
        if let asked {
            guard let app = apps.first(where: { $0.bundleId == asked }) else {
                throw APIError(.badRequest, .unknownApp, "no app \(UntrustedText.quoted(asked, limit: 128)) is configured on this server")
            }
            return app
        }
        guard apps.count == 1, let only = apps.first else {
            throw APIError(
                .badRequest, .bundleIdRequired,
                "this key is not limited to one app, and reads one app's customers at a time: give bundleId, one of \(apps.map(\.bundleId).joined(separator: ", "))"
            )
        }
        return only
    }

    /// The customer's answer in one app and environment, or 404 when the app has no data for them there.
    func answer(_ customerId: String, bundleId: String, environment: AppStoreEnvironment) async throws -> Response {
        switch await reader.read(customerId, bundleId: bundleId, environment: environment, now: now) {
        case .found(let body):
            return StorekeeperApplication.jsonResponse(encoded: body)
        case .unknownCustomer:
            throw APIError(.notFound, .unknownCustomer, "no customer '\(customerId)' for \(bundleId) in \(environment)")
        case .storageFailure:
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
    }
}
