import Foundation
package import Hummingbird
import HummingbirdAuth
import StorekeeperHTTP

/// Who a request's API key is: its name, its scope, and the one app it may act for (`nil`: any app).
package struct APIKeyIdentity: Sendable, Hashable {
    package var name: String
    /// The app an `app` key (or a `support` key given one) is limited to; `nil` for `admin` keys and `support` keys
    /// of every app.
    package var bundleId: String?
    package var scope: ServerConfiguration.APIKey.Scope

    package var isAdmin: Bool { scope == .admin }
}

/// The request context of Storekeeper's routes: Hummingbird's, and the API key's identity once
/// `APIKeyAuthenticator` has checked it (hummingbird-auth's pattern).
package struct StorekeeperRequestContext: AuthRequestContext, RequestContext {
    package var coreContext: CoreRequestContextStorage
    package var identity: APIKeyIdentity?

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        identity = nil
    }
}

/// Sets the request's ``APIKeyIdentity`` from `Authorization: Bearer <key>` (the scheme case-insensitive, RFC 9110
/// §11.1; spaces around the key ignored), comparing keys by SHA-256; a request without a known key is refused with
/// 401 before any handler runs, and a key whose scope the routes do not take with 403 (app and admin keys for the app
/// API, support and admin keys for the support API). Keys are never logged.
struct APIKeyAuthenticator: AuthenticatorMiddleware {
    typealias Context = StorekeeperRequestContext
    let keysByHash: [String: APIKeyIdentity]
    let scopes: Set<ServerConfiguration.APIKey.Scope>
    /// What the routes are, for the 403's message.
    let routes: String

    init(configuration: ServerConfiguration, scopes: Set<ServerConfiguration.APIKey.Scope> = [.app, .admin], routes: String = "the app API") {
        keysByHash = Dictionary(
            configuration.apiKeys.map { key in
                (key.sha256.lowercased(), APIKeyIdentity(name: key.name, bundleId: key.scope == .admin ? nil : key.bundleId, scope: key.scope))
            }
        ) { first, _ in first }
        self.scopes = scopes
        self.routes = routes
    }

    func authenticate(request: Request, context: Context) async throws -> APIKeyIdentity? {
        guard let header = request.headers[.authorization], header.count > 7, header.prefix(7).lowercased() == "bearer " else {
            throw APIError(.unauthorized, .unauthorized, "an API key is required (Authorization: Bearer <key>)")
        }
        // Optional whitespace around the credential is SP and HTAB (RFC 9110 §5.6.3).
        let key = header.utf8.dropFirst(7).drop { $0 == 0x20 || $0 == 0x09 }
        let trimmed = key[..<(key.lastIndex { $0 != 0x20 && $0 != 0x09 }.map { key.index(after: $0) } ?? key.startIndex)]
        let hash = ServerConfiguration.hash(apiKey: Substring(trimmed))
        guard let identity = keysByHash[hash] else { throw APIError(.unauthorized, .unauthorized, "unknown API key") }
        guard scopes.contains(identity.scope) else {
            // The admin routes share the app API's keys (an app key is refused there by the route, as admin-only): a
            // key refused here is told what those routes take.
            let admin = request.uri.path.hasPrefix("/v1/admin/")
            let allowed =
                admin ? "admin" : ServerConfiguration.APIKey.Scope.allCases.filter(scopes.contains).map(\.rawValue).joined(separator: " or ")
            let named = admin ? "the admin API" : request.uri.path.hasPrefix("/v1/events") ? "the events API" : routes
            throw APIError(.forbidden, .wrongScope, "\(named) takes \(allowed) keys; this key's scope is \(identity.scope.rawValue)")
        }
        return identity
    }
}

extension StorekeeperRequestContext {
    /// A path parameter, percent-decoded (`pro%2Emonthly` and `pro.monthly` are the same product, whichever way a
    /// client encodes the path); a malformed escape is kept as it came, to be refused as invalid by the route.
    package func pathValue(_ name: String) -> String {
        let raw = parameters.get(name) ?? ""
        // Foundation's decoding only when there is an escape: it would cost every read, and nearly no ID has one.
        return raw.utf8.contains(UInt8(ascii: "%")) ? raw.removingPercentEncoding ?? raw : raw
    }
}
