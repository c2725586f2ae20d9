import AppStoreModels
import Hummingbird
import StorekeeperHTTP

/// A request no route matches gets a JSON error like every other refusal: 405 with `Allow` when the path is one of
/// ours with another method (a browser's GET on the webhook URL says the URL is right), 404 otherwise.
struct UnmatchedRouteMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The method each of our paths takes.
    static func allowedMethod(for path: String) -> HTTPRequest.Method? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        switch (parts.count, parts.first, parts.dropFirst().first, parts.last) {
        case (2, "appstore", "notifications", _): return .post
        case (1, "metrics", _, _), (1, "health", _, _): return .get
        case (3, "v1", "customers", let id?) where !id.isEmpty: return .get
        case (4, "v1", "customers", "transactions") where !parts.dropFirst(2).first!.isEmpty: return .post
        case (4, "v1", "customers", "app-account-token") where !parts.dropFirst(2).first!.isEmpty: return .post
        case (5, "v1", "admin", "reconcile"): return .post
        default: return nil
        }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let path = UntrustedText.escaped(request.uri.path, limit: 256)
            let method = UntrustedText.escaped(request.method.rawValue, limit: 32)
            if let allowed = Self.allowedMethod(for: request.uri.path), allowed != request.method {
                throw APIError(
                    .methodNotAllowed, .methodNotAllowed, "\(path) takes \(allowed.rawValue), not \(method)", headers: [.allow: allowed.rawValue])
            }
            throw APIError(.notFound, .noSuchRoute, "nothing is served at \(method) \(path)")
        }
    }
}
