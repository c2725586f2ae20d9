import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import StorekeeperCore
import StorekeeperHTTP

/// Promotional entitlements (``PromotionalGrant``): granted and revoked by support, audited, in the customer's
/// entitlements and events as `promotional`, never as a purchase.
extension SupportAPI {
    func addGrantRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/customers/:customerId/promotional-entitlements") { request, context in
            try await grants(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
        group.post("/customers/:customerId/promotional-entitlements") { request, context in
            try await grant(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
        group.post("/customers/:customerId/promotional-entitlements/:grantId/revoke") { request, context in
            try await revoke(
                request, customerId: try CustomerAPI.customerId(context), grantId: context.pathValue("grantId"),
                identity: try context.requireIdentity())
        }
    }

    /// A grant as the API shows it: the record, and whether it gives its entitlement now.
    struct GrantView: Encodable {
        var grant: PromotionalGrant
        var active: Bool

        private enum CodingKeys: String, CodingKey {
            case id, entitlement, grantedAt, expiresDate, grantedBy, reason, revokedAt, revokedBy, revokeReason, active
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(grant.id, forKey: .id)
            try container.encode(grant.entitlement, forKey: .entitlement)
            try container.encode(grant.grantedAt, forKey: .grantedAt)
            try container.encode(grant.expiresDate, forKey: .expiresDate)
            try container.encode(grant.grantedBy ?? "", forKey: .grantedBy)
            try container.encode(grant.reason ?? "", forKey: .reason)
            try container.encodeIfPresent(grant.revokedAt, forKey: .revokedAt)
            try container.encodeIfPresent(grant.revokedBy, forKey: .revokedBy)
            try container.encodeIfPresent(grant.revokeReason, forKey: .revokeReason)
            try container.encode(active, forKey: .active)
        }
    }

    /// `{"entitlement", "days": 1-3650 | "expiresDate": epoch ms, "reason"}`, read strictly.
    struct GrantBody: Decodable {
        var entitlement: String
        var days: Int?
        var expiresDate: Int64?
        var reason: String
    }

    /// `{"reason"}`, read strictly.
    struct RevokeBody: Decodable {
        var reason: String
    }

    static let grantShape = #"{"entitlement": "…", "days": 1-3650 or "expiresDate": epoch milliseconds, "reason": "…"}"#

    /// `GET /v1/support/customers/{id}/promotional-entitlements` — the customer's grants, oldest first (revoked and
    /// expired ones too).
    func grants(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let key = CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId)
        struct Grants: Encodable { var grants: [GrantView] }
        return StorekeeperApplication.jsonResponse(Grants(grants: try await grantViews(key)))
    }

    /// The customer's grants; 404 when the app has no data for them.
    func grantViews(_ key: CustomerKey) async throws(APIError) -> [GrantView] {
        try await requireKnown(key)
        let at = now()
        do {
            return try await store.promotionalGrants(key).map { GrantView(grant: $0, active: $0.isActive(at: at)) }
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
    }

    func requireKnown(_ key: CustomerKey) async throws(APIError) {
        let known: Bool
        do {
            known = try await store.customerExists(key.customerId, bundleId: key.bundleId, environment: key.environment)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        guard known else {
            throw APIError(.notFound, .unknownCustomer, "no customer '\(key.customerId)' for \(key.bundleId) in \(key.environment)")
        }
    }

    /// `POST /v1/support/customers/{id}/promotional-entitlements` — grants an entitlement until a date, audited; 201
    /// with the grant and the audit record.
    func grant(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let body = try await Self.body(request, as: GrantBody.self, shape: Self.grantShape)
        let (bundleId, environment) = try CustomerAPI.writeScope(of: query, identity: identity, configuration.apps)
        let key = CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId)
        let at = now()
        let expires = try Self.grantExpiry(days: body.days, expiresDate: body.expiresDate, now: at)
        let names = Set(configuration.entitlements.productEntitlements.values.flatMap { $0 })
        if let problem = PromotionalGrant.problem(entitlement: body.entitlement, configured: names) {
            throw APIError(.badRequest, .invalidParameter, problem)
        }
        let reason = try Self.reason(body.reason)
        try await requireKnown(key)
        let made = PromotionalGrant(
            id: UUID().uuidString.lowercased(), customer: key, entitlement: body.entitlement, grantedAt: at, expiresDate: expires,
            grantedBy: identity.name, reason: reason)
        var asked: [String: JSONValue] = ["entitlement": .string(body.entitlement), "reason": .string(reason)]
        if let days = body.days { asked["days"] = .integer(Int64(days)) }
        if let date = body.expiresDate { asked["expiresDate"] = .integer(date) }
        let (grant, action) = try await performGrant(made, asked: asked, identity: identity)
        struct Done: Encodable {
            var grant: GrantView
            var action: SupportAction
        }
        var response = StorekeeperApplication.jsonResponse(Done(grant: GrantView(grant: grant, active: grant.isActive(at: at)), action: action))
        response.status = .created
        return response
    }

    /// `POST /v1/support/customers/{id}/promotional-entitlements/{grantId}/revoke` — ends a grant at once, audited.
    func revoke(_ request: Request, customerId: String, grantId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        guard let uuid = UUID(uuidString: grantId) else {
            throw APIError(.badRequest, .invalidParameter, "\(UntrustedText.quoted(grantId, limit: 64)) is not a grant ID (a UUID)")
        }
        let id = uuid.uuidString.lowercased()
        let body = try await Self.body(request, as: RevokeBody.self, shape: #"{"reason": "…"}"#)
        let reason = try Self.reason(body.reason)
        let (bundleId, environment) = try CustomerAPI.writeScope(of: query, identity: identity, configuration.apps)
        let key = CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId)
        let (grant, action) = try await performRevoke(id, of: key, reason: reason, identity: identity)
        struct Done: Encodable {
            var grant: GrantView
            var action: SupportAction
        }
        return StorekeeperApplication.jsonResponse(Done(grant: GrantView(grant: grant, active: false), action: action))
    }

    /// Revokes one of the customer's grants (`id` lowercase), logged; the grant and the audit record.
    func performRevoke(
        _ id: String, of key: CustomerKey, reason: String, identity: APIKeyIdentity
    ) async throws(APIError) -> (PromotionalGrant, SupportAction) {
        let at = now()
        let audit = SupportAction(
            at: at, keyName: identity.name, customer: key, action: SupportAction.Kind.revokePromotional.rawValue, target: id,
            request: ["reason": .string(reason)], outcome: "done", detail: ["grantId": .string(id)])
        let (grant, action) = try await changeGrant(
            .revoke(id: id, customer: key, at: at, keyName: identity.name, reason: reason), audit: audit, key: key, grantId: id)
        log(action, by: identity, ["customer.id": .string(key.customerId), "grant.id": .string(id)])
        return (grant, action)
    }

    /// Grants `made` (from the dashboard too), logged; the grant and the audit record.
    func performGrant(
        _ made: PromotionalGrant, asked: [String: JSONValue], identity: APIKeyIdentity
    ) async throws(APIError) -> (PromotionalGrant, SupportAction) {
        let audit = SupportAction(
            at: made.grantedAt, keyName: identity.name, customer: made.customer, action: SupportAction.Kind.grantPromotional.rawValue,
            target: made.id, request: asked, outcome: "done",
            detail: ["grantId": .string(made.id), "expiresDate": .integer(made.expiresDate.epochMilliseconds)])
        let done = try await changeGrant(.grant(made), audit: audit, key: made.customer, grantId: made.id)
        log(done.1, by: identity, ["customer.id": .string(made.customerId), "grant.id": .string(made.id)])
        return done
    }

    private func changeGrant(
        _ change: PromotionalGrantChange, audit: SupportAction, key: CustomerKey, grantId: String
    ) async throws(APIError) -> (PromotionalGrant, SupportAction) {
        let outcome: PromotionalGrantOutcome
        do {
            outcome = try await store.changeGrant(change, audit: audit)
        } catch {
            throw APIError(
                .serviceUnavailable, .storageUnavailable, "the ledger could not be written; look at the customer's grants before trying again")
        }
        let at = { (date: Date) in ISO8601DateFormatter().string(from: date) }
        switch outcome {
        case .done(let grant, let actionId):
            var action = audit
            action.id = actionId
            return (grant, action)
        case .refused(.unknownGrant, let actionId):
            throw APIError(
                .notFound, .unknownGrant,
                "customer '\(key.customerId)' has no promotional grant \(grantId) in \(key.bundleId) (\(key.environment.rawValue)) (audit record \(actionId))"
            )
        case .refused(.alreadyRevoked(let grant), let actionId):
            throw APIError(
                .conflict, .grantRevoked,
                "promotional grant \(grantId) was revoked at \(grant.revokedAt.map(at) ?? "?") by '\(grant.revokedBy ?? "?")' (audit record \(actionId))"
            )
        case .refused(.expired(let grant), let actionId):
            throw APIError(
                .conflict, .grantExpired,
                "promotional grant \(grantId) expired at \(at(grant.expiresDate)): there is nothing left to revoke (audit record \(actionId))")
        case .refused(.tooMany(let limit), let actionId):
            throw APIError(
                .conflict, .tooManyGrants,
                "customer '\(key.customerId)' has \(limit) active promotional grants, the most allowed: revoke one first (audit record \(actionId))")
        }
    }

    /// The grant's end: `days` (1-3650) from now, or `expiresDate` (after now, at most ten years ahead); one of them.
    static func grantExpiry(days: Int?, expiresDate: Int64?, now: Date) throws(APIError) -> Date {
        switch (days, expiresDate) {
        case (let days?, nil):
            guard (1...3_650).contains(days) else {
                throw APIError(.badRequest, .invalidParameter, "days must be 1-3650 (ten years), not \(days)")
            }
            return now.addingTimeInterval(TimeInterval(days) * 86_400)
        case (nil, let milliseconds?):
            let date = Date(epochMilliseconds: milliseconds)
            guard date > now, date.timeIntervalSince(now) <= PromotionalGrant.longest else {
                throw APIError(
                    .badRequest, .invalidParameter,
                    "expiresDate must be after now and at most ten years ahead (epoch milliseconds), not \(milliseconds)")
            }
            return date
        case (nil, nil):
            throw APIError(.badRequest, .invalidParameter, "give days (1-3650) or expiresDate (epoch milliseconds): a grant ends")
        case (.some, .some):
            throw APIError(.badRequest, .invalidParameter, "give days or expiresDate, not both")
        }
    }

    /// A reason as the audit log keeps it: required, at most 500 bytes, control characters escaped.
    static func reason(_ text: String) throws(APIError) -> String {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw APIError(.badRequest, .invalidParameter, "reason is empty: say why (the audit log keeps it)") }
        guard trimmed.utf8.count <= 500 else {
            throw APIError(.badRequest, .invalidParameter, "reason is \(trimmed.utf8.count) bytes: at most 500")
        }
        return UntrustedText.escaped(trimmed, limit: 500)
    }
}
