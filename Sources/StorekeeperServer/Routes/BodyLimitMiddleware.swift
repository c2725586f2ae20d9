import HTTPTypes
import Hummingbird
import StorekeeperHTTP

/// A body declared larger than ``StorekeeperApplication/maximumBody`` (its `Content-Length`) is refused on every
/// route, 413 `body-too-large`, before any of it is read, whether the route reads a body or not: a route that reads
/// none (`/health`, `POST …/resume`) would otherwise answer 200 to a body of any size. The answer ends the connection
/// (the body was not read to its end, ``ConnectionDeadlines``), and says so. The notification webhook refuses it itself
/// (``StorekeeperApplication/readBody(_:)``, the same answer), so that the refusal is logged and counted as a refused
/// notification.
struct BodyLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if StorekeeperApplication.declaresTooLarge(request), !(request.method == .post && request.uri.path == NotificationWebhook.path) {
            throw APIError.bodyTooLarge
        }
        return try await next(request, context)
    }
}

extension APIError {
    /// 413: a body over 1 MiB; the connection is closed after the answer (the rest of the body is never read).
    static var bodyTooLarge: APIError {
        APIError(.contentTooLarge, .bodyTooLarge, "the body is over 1 MiB", headers: [.connection: "close"])
    }

    /// 408: a body that did not arrive within the body-read timeout; the connection is closed after the answer.
    static func bodyTimeout(seconds: Double) -> APIError {
        APIError(.requestTimeout, .bodyTimeout, "the body did not arrive within \(seconds) seconds", headers: [.connection: "close"])
    }
}
