import AppStoreModels
import HTTPTypes
import Hummingbird
import StorekeeperHTTP

/// A request no route matches gets a JSON error like every other refusal: 405 with `Allow` when the path is one of
/// ours with another method (a browser's GET on the webhook URL says the URL is right), 404 otherwise.
struct UnmatchedRouteMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The methods each of our paths takes (`Allow`).
    static func allowedMethods(for path: String) -> String? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        let third = parts.dropFirst(2).first ?? ""
        switch (parts.count, parts.first, parts.dropFirst().first, parts.last) {
        case (2, "appstore", "notifications", _): return "POST"
        case (1, "metrics", _, _), (1, "health", _, _), (1, "openapi.json", _, _): return "GET, HEAD"
        case (3, "v1", "customers", let id?) where !id.isEmpty: return "GET, DELETE"
        case (4, "v1", "customers", "transactions") where !third.isEmpty: return "POST"
        case (4, "v1", "customers", "app-account-token") where !third.isEmpty: return "POST"
        case (5, "v1", "admin", "reconcile"): return "POST"
        case (2, "v1", "events", _): return "GET"
        case (3, "v1", "events", let id?) where !id.isEmpty: return "GET"
        case (3, "v1", "admin", "webhooks"): return "GET"
        case (3, "v1", "admin", "imports"): return "GET, POST"
        case (4, "v1", "admin", let id?) where third == "imports" && !id.isEmpty: return "GET, DELETE"
        case (5, "v1", "admin", "resume"), (5, "v1", "admin", "replay"), (5, "v1", "admin", "redeliver"): return third == "webhooks" ? "POST" : nil
        case (4, "v1", "admin", let id?) where third == "events" && !id.isEmpty: return "GET"
        case (3, "v1", "support", "search"): return "GET"
        case (3, "v1", "support", "mass-extensions"): return "GET, POST"
        case (5, "v1", "support", _) where third == "mass-extensions": return "GET"
        case (4, "v1", "support", let id?) where third == "customers" && !id.isEmpty: return "GET"
        case (5, "v1", "support", "refunds") where third == "customers": return "GET"
        case (5, "v1", "support", "promotional-entitlements") where third == "customers": return "GET, POST"
        case (7, "v1", "support", "revoke") where third == "customers" && parts.dropFirst(4).first == "promotional-entitlements": return "POST"
        case (7, "v1", "support", "extend") where third == "customers" && parts.dropFirst(4).first == "subscriptions": return "POST"
        case (4, "v1", "customers", "consumption-consent") where !third.isEmpty: return "PUT"
        case (3, "v1", "support", "overview"), (3, "v1", "support", "consumption-requests"): return "GET"
        case (4, "v1", "support", let id?) where third == "consumption-requests" && !id.isEmpty: return "GET"
        case (5, "v1", "support", "answer") where third == "consumption-requests": return "POST"
        case (2, "dashboard", "login", _): return "GET, POST"
        case (2, "dashboard", "logout", _): return "POST"
        case (1, "dashboard", _, _), (2, "dashboard", "search", _), (2, "dashboard", "consumption-requests", _): return "GET"
        default: return nil
        }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let path = UntrustedText.escaped(request.uri.path, limit: 256)
            let method = UntrustedText.escaped(request.method.rawValue, limit: 32)
            if let allowed = Self.allowedMethods(for: request.uri.path), !allowed.split(separator: ", ").contains(Substring(request.method.rawValue))
            {
                throw APIError(.methodNotAllowed, .methodNotAllowed, "\(path) takes \(allowed), not \(method)", headers: [.allow: allowed])
            }
            if request.uri.path == "/dashboard" || request.uri.path.hasPrefix("/dashboard/") {
                // People read the dashboard: a page, not JSON (nothing of the request is echoed).
                var headers = HTTPFields()
                headers[.contentType] = "text/html; charset=utf-8"
                headers[.cacheControl] = "no-store"
                headers[.contentSecurityPolicy] = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
                headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
                let page = """
                    <!doctype html><html lang="en"><head><meta charset="utf-8"><title>Not found</title></head>\
                    <body><main><h1>Not found</h1><p>There is no such page in the dashboard.</p>\
                    <p><a href="/dashboard">Back to the dashboard</a></p></main></body></html>
                    """
                return Response(status: .notFound, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page)))
            }
            throw APIError(.notFound, .noSuchRoute, "nothing is served at \(method) \(path)")
        }
    }
}
