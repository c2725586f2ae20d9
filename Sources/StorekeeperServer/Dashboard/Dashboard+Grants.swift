import AppStoreModels
import Foundation
import Hummingbird
import StorekeeperCore
import StorekeeperHTTP

/// Granting and revoking promotional entitlements from the customer page, each behind a confirmation form
/// (``SupportAPI/performGrant(_:asked:identity:)``, ``SupportAPI/performRevoke(_:of:reason:identity:)``).
extension Dashboard {
    func addGrantRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/customers/:customerId/promotional-entitlements/new") { request, context in
            try await page(request) { session in try await grantForm(request, context, session) }
        }
        group.post("/customers/:customerId/promotional-entitlements") { request, context in
            try await withForm(request) { form, id, session in try await grant(form, id, context, session) }
        }
        group.get("/customers/:customerId/promotional-entitlements/:grantId/revoke") { request, context in
            try await page(request) { session in try await revokeForm(request, context, session) }
        }
        group.post("/customers/:customerId/promotional-entitlements/:grantId/revoke") { request, context in
            try await withForm(request) { form, id, session in try await revoke(form, id, context, session) }
        }
    }

    func grantForm(_ request: Request, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let key = try customerKey(request, context, session)
        try await support.requireKnown(key)
        struct Form {
            var chrome: Chrome
            var customerId, bundleId, environment, csrf, action, back: String
            var formToken = ""
            var names: [String]
            var hasNames: Bool
        }
        let names = Set(support.configuration.entitlements.productEntitlements.values.flatMap { $0 }).sorted()
        var page = Form(
            chrome: Self.chrome("Grant", session), customerId: key.customerId, bundleId: key.bundleId, environment: key.environment.rawValue,
            csrf: session.csrf, action: "/dashboard/customers/\(Self.segment(key.customerId))/promotional-entitlements",
            back: Self.customerLink(key.customerId, key.bundleId, key.environment),
            names: names, hasNames: !names.isEmpty)
        page.formToken = DashboardSessions.formToken(action: page.action, csrf: session.csrf)
        return html("grant", page)
    }

    /// The customer the form names (its `bundleId` and `environment` fields), as the extension's form does.
    func formCustomer(_ form: [String: String], _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) throws -> CustomerKey {
        let customerId = try CustomerAPI.customerId(context)
        try CustomerAPI.refuseOtherApp(session.identity, asked: form["bundleId"])
        let app = try CustomerAPI.app(for: session.identity, asked: form["bundleId"], support.configuration.apps)
        let environment = try QueryParameters.environment(form["environment"]) ?? app.defaultEnvironment
        guard app.environments.contains(environment) else {
            throw APIError(.badRequest, .unknownEnvironment, "app '\(app.bundleId)' does not accept environment \(environment.rawValue)")
        }
        return CustomerKey(bundleId: app.bundleId, environment: environment, customerId: customerId)
    }

    func grant(
        _ form: [String: String], _ sessionId: String, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session
    ) async throws -> Response {
        let key = try formCustomer(form, context, session)
        guard let days = Int(form["days"] ?? "") else { throw APIError(.badRequest, .invalidParameter, "give the days (1 to 3650)") }
        let at = support.now()
        let expires = try SupportAPI.grantExpiry(days: days, expiresDate: nil, now: at)
        let entitlement = form["entitlement"] ?? ""
        let names = Set(support.configuration.entitlements.productEntitlements.values.flatMap { $0 })
        if let problem = PromotionalGrant.problem(entitlement: entitlement, configured: names) {
            throw APIError(.badRequest, .invalidParameter, problem)
        }
        let reason = try SupportAPI.reason(form["reason"] ?? "")
        try await support.requireKnown(key)
        try claimForm(form, session: sessionId)
        let made = PromotionalGrant(
            id: UUID().uuidString.lowercased(), customer: key, entitlement: entitlement, grantedAt: at, expiresDate: expires,
            grantedBy: session.identity.name, reason: reason)
        let (grant, action) = try await support.performGrant(
            made, asked: ["entitlement": .string(entitlement), "days": .integer(Int64(days)), "reason": .string(reason)], identity: session.identity)
        return message(
            session, heading: "Granted",
            text:
                "\(key.customerId) has \(grant.entitlement) until \(Self.time(grant.expiresDate)) (promotional, not a purchase). Audit record \(action.id).",
            link: Self.customerLink(key.customerId, key.bundleId, key.environment), linkText: "Back to the customer")
    }

    /// The grant the path names, among the customer's; 404 otherwise.
    func namedGrant(_ context: StorekeeperRequestContext, _ key: CustomerKey) async throws -> PromotionalGrant {
        let text = context.pathValue("grantId")
        guard let uuid = UUID(uuidString: text) else {
            throw APIError(.badRequest, .invalidParameter, "\(UntrustedText.quoted(text, limit: 64)) is not a grant ID (a UUID)")
        }
        let id = uuid.uuidString.lowercased()
        let grants: [PromotionalGrant]
        do {
            grants = try await support.store.promotionalGrants(key)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        guard let grant = grants.first(where: { $0.id == id }) else {
            throw APIError(.notFound, .unknownGrant, "customer '\(key.customerId)' has no promotional grant \(UntrustedText.quoted(id, limit: 64))")
        }
        return grant
    }

    func revokeForm(_ request: Request, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let key = try customerKey(request, context, session)
        let grant = try await namedGrant(context, key)
        if let revoked = grant.revokedAt {
            throw APIError(.conflict, .grantRevoked, "this grant was revoked at \(Self.time(revoked)) by '\(grant.revokedBy ?? "")'")
        }
        guard grant.isActive(at: support.now()) else {
            throw APIError(.conflict, .grantExpired, "this grant expired at \(Self.time(grant.expiresDate)): there is nothing left to revoke")
        }
        struct Form {
            var chrome: Chrome
            var customerId, bundleId, environment, entitlement, granted, grantedBy, expires, csrf, action, back: String
            var formToken = ""
        }
        var page = Form(
            chrome: Self.chrome("Revoke", session), customerId: key.customerId, bundleId: key.bundleId, environment: key.environment.rawValue,
            entitlement: grant.entitlement, granted: Self.time(grant.grantedAt), grantedBy: grant.grantedBy ?? "",
            expires: Self.time(grant.expiresDate), csrf: session.csrf,
            action: "/dashboard/customers/\(Self.segment(key.customerId))/promotional-entitlements/\(grant.id)/revoke",
            back: Self.customerLink(key.customerId, key.bundleId, key.environment))
        page.formToken = DashboardSessions.formToken(action: page.action, csrf: session.csrf)
        return html("revoke", page)
    }

    func revoke(
        _ form: [String: String], _ sessionId: String, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session
    ) async throws -> Response {
        let key = try formCustomer(form, context, session)
        let grant = try await namedGrant(context, key)
        let reason = try SupportAPI.reason(form["reason"] ?? "")
        try claimForm(form, session: sessionId)
        let (_, action) = try await support.performRevoke(grant.id, of: key, reason: reason, identity: session.identity)
        return message(
            session, heading: "Revoked",
            text: "\(key.customerId) no longer has \(grant.entitlement) from this grant. Audit record \(action.id).",
            link: Self.customerLink(key.customerId, key.bundleId, key.environment), linkText: "Back to the customer")
    }
}
