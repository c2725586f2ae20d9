import AppStoreModels
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Mustache
import StorekeeperCore
import StorekeeperHTTP

/// The support dashboard under `/dashboard`: server-rendered HTML (swift-mustache templates built into the binary, no
/// script, no external asset), for a person holding a `support` or `admin` key. Signing in exchanges the key for a
/// session cookie (HttpOnly, SameSite=Strict, Secure behind TLS; ``DashboardSessions``); every form carries the
/// session's CSRF token; every page is sent with a strict Content-Security-Policy. What it shows and does is the support
/// API's (``SupportAPI``): the same checks, the same audit log.
struct Dashboard: Sendable {
    let support: SupportAPI
    let sessions: DashboardSessions
    let library: MustacheLibrary
    /// Support and admin keys by their SHA-256 (the only keys that sign in).
    let keysByHash: [String: APIKeyIdentity]
    let logger: Logger

    static let sessionCookie = "storekeeper_session"
    static let loginCookie = "storekeeper_login"
    static let templates = [
        ("top", PackageResources.top_mustache), ("bottom", PackageResources.bottom_mustache), ("login", PackageResources.login_mustache),
        ("overview", PackageResources.overview_mustache), ("search", PackageResources.search_mustache),
        ("customer", PackageResources.customer_mustache), ("consumptionrows", PackageResources.consumptionrows_mustache),
        ("consumption", PackageResources.consumption_mustache), ("extend", PackageResources.extend_mustache),
        ("answer", PackageResources.answer_mustache), ("message", PackageResources.message_mustache),
        ("refunds", PackageResources.refunds_mustache), ("grant", PackageResources.grant_mustache),
        ("revoke", PackageResources.revoke_mustache),
    ]

    init(support: SupportAPI, sessions: DashboardSessions = DashboardSessions(), logger: Logger) throws {
        self.support = support
        self.sessions = sessions
        self.logger = logger
        var library = MustacheLibrary()
        for (name, bytes) in Self.templates { try library.register(String(decoding: bytes, as: UTF8.self), named: name) }
        self.library = library
        var keys: [String: APIKeyIdentity] = [:]
        for key in support.configuration.apiKeys where key.scope != .app {
            keys[key.sha256.lowercased()] = APIKeyIdentity(name: key.name, bundleId: key.scope == .admin ? nil : key.bundleId, scope: key.scope)
        }
        keysByHash = keys
    }

    func addRoutes(to router: Router<StorekeeperRequestContext>) {
        let group = router.group("/dashboard")
        group.get("/login") { request, _ in loginPage(request, error: nil) }
        group.post("/login") { request, _ in try await signIn(request) }
        group.post("/logout") { request, _ in try await withForm(request) { _, id, _ in signOut(id) } }
        group.get { request, _ in try await page(request) { session in try await overview(session) } }
        group.get("/search") { request, _ in try await page(request) { session in try await search(request, session) } }
        group.get("/customers/:customerId") { request, context in
            try await page(request) { session in try await customer(request, context, session) }
        }
        group.get("/customers/:customerId/refunds") { request, context in
            try await page(request) { session in try await refunds(request, context, session) }
        }
        group.get("/customers/:customerId/subscriptions/:originalTransactionId/extend") { request, context in
            try await page(request) { session in try await extendForm(request, context, session) }
        }
        group.post("/customers/:customerId/subscriptions/:originalTransactionId/extend") { request, context in
            try await withForm(request) { form, id, session in try await extend(form, id, context, session) }
        }
        addGrantRoutes(to: group)
        group.get("/consumption-requests") { request, _ in try await page(request) { session in try await consumption(request, session) } }
        group.get("/consumption-requests/:uuid/answer") { request, context in
            try await page(request) { session in try await answerForm(context, session) }
        }
        group.post("/consumption-requests/:uuid/answer") { request, context in
            try await withForm(request) { form, _, session in try await answer(form, context, session) }
        }
    }

    // MARK: - Pages and sessions

    /// What every page's header shows.
    struct Chrome {
        var title: String
        var signedIn: Bool
        var keyName: String
        var csrf: String
        var query: String
        var error: String?
        var notice: String?
    }

    static func chrome(
        _ title: String, _ session: DashboardSessions.Session?, query: String = "", error: String? = nil, notice: String? = nil
    ) -> Chrome {
        Chrome(
            title: title, signedIn: session != nil, keyName: session?.identity.name ?? "", csrf: session?.csrf ?? "", query: query, error: error,
            notice: notice)
    }

    /// A rendered page, with the headers every dashboard page has.
    func html(_ template: String, _ object: Any, status: HTTPResponse.Status = .ok) -> Response {
        let body = library.render(object, withTemplate: template) ?? "template \(template) is missing"
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        // No script runs, nothing loads from elsewhere, no other site frames it, forms post here only.
        headers[.contentSecurityPolicy] =
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func redirect(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store"])
    }

    /// The session the request's cookie names, with its ID.
    func session(_ request: Request) -> (id: String, session: DashboardSessions.Session)? {
        guard let id = request.cookies[Self.sessionCookie]?.value, id.utf8.count == 43, let session = sessions.session(id) else { return nil }
        return (id, session)
    }

    /// A signed-in page: to the sign-in page without a session; the support API's errors shown in the page.
    func page(_ request: Request, _ body: (DashboardSessions.Session) async throws -> Response) async throws -> Response {
        guard let (_, session) = session(request) else { return Self.redirect("/dashboard/login") }
        do {
            return try await body(session)
        } catch {
            return failure(error, session)
        }
    }

    /// A failure as a page: the support API's error as it says it; anything else (the ledger failing) as 503.
    func failure(_ error: any Error, _ session: DashboardSessions.Session) -> Response {
        if let error = error as? APIError {
            return message(session, heading: "Not done", text: error.message, status: error.status, error: true)
        }
        logger.error("dashboard page failed", metadata: ["error": .string("\(error)")])
        return message(session, heading: "Not done", text: "The ledger could not be read; try again.", status: .serviceUnavailable, error: true)
    }

    /// A form's POST: a session and the form's CSRF token are required (else 303 to sign in, or 403); the form's
    /// fields to `body`.
    func withForm(
        _ request: Request, _ body: ([String: String], String, DashboardSessions.Session) async throws -> Response
    ) async throws -> Response {
        guard let (id, session) = session(request) else { return Self.redirect("/dashboard/login") }
        do {
            let form = try await Self.form(request)
            guard let token = form["csrf"], Self.same(token, session.csrf) else {
                logger.warning("dashboard form refused: its CSRF token is missing or wrong", metadata: ["api_key": .string(session.identity.name)])
                return message(
                    session, heading: "Refused", text: "This form's security token is missing or wrong: go back, reload the page and try again.",
                    status: .forbidden, error: true)
            }
            // An action form's one-time token was made for its page's action: one posted elsewhere is refused.
            if let token = form["form"], !DashboardSessions.formMatches(token, action: request.uri.path, csrf: session.csrf) {
                logger.warning(
                    "dashboard form refused: its one-time token is not valid, or another form's",
                    metadata: ["api_key": .string(session.identity.name)])
                return message(
                    session, heading: "Refused",
                    text: "This form's one-time token is not valid, or is another form's: go back, reload the page and try again.",
                    status: .forbidden, error: true)
            }
            return try await body(form, id, session)
        } catch {
            return failure(error, session)
        }
    }

    /// Claims an action form's one-time token for the session (`form`): a form sent again is refused, changing nothing.
    func claimForm(_ form: [String: String], session id: String) throws(APIError) {
        guard let token = form["form"] else {
            throw APIError(.forbidden, .formTokenMissing, "this form carries no one-time token: go back, reload the page and try again")
        }
        guard sessions.claimForm(id, token) else {
            throw APIError(
                .conflict, .formSentAlready,
                "this form was sent already (a reload or a second click): nothing was done again; open the customer's page to see what was done")
        }
    }

    func message(
        _ session: DashboardSessions.Session?, heading: String, text: String, link: String? = nil, linkText: String = "",
        status: HTTPResponse.Status = .ok, error: Bool = false
    ) -> Response {
        struct Message {
            var chrome: Chrome
            var heading: String
            var text: String
            var link: String?
            var linkText: String
        }
        return html(
            "message",
            Message(
                chrome: Self.chrome(heading, session, error: error ? text : nil), heading: heading, text: error ? "" : text, link: link,
                linkText: linkText),
            status: status)
    }

    /// An `application/x-www-form-urlencoded` body (at most 1 MiB) as its fields; a field given twice, or not
    /// percent-encoded, is refused.
    static func form(_ request: Request) async throws -> [String: String] {
        let buffer = try await StorekeeperApplication.readBody(request)
        let text = String(buffer: buffer)
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            let value = parts.count > 1 ? String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding : ""
            guard let value else {
                throw APIError(.badRequest, .malformedBody, "the form's field \(UntrustedText.quoted(name, limit: 32)) is not percent-encoded")
            }
            guard fields[name] == nil else {
                throw APIError(.badRequest, .malformedBody, "the form gives \(UntrustedText.quoted(name, limit: 32)) twice")
            }
            fields[name] = value
        }
        return fields
    }

    /// Constant-time comparison of two tokens.
    static func same(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// Whether the request came over TLS (a reverse proxy says so in `X-Forwarded-Proto`): cookies are then Secure.
    static func overTLS(_ request: Request) -> Bool {
        request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.lowercased() == "https"
    }

    static func cookie(_ name: String, _ value: String, maxAge: Int, _ request: Request) -> Cookie {
        Cookie(name: name, value: value, maxAge: maxAge, path: "/dashboard", secure: overTLS(request), httpOnly: true, sameSite: .strict)
    }

    // MARK: - Signing in and out

    func loginPage(_ request: Request, error: String?, status: HTTPResponse.Status = .ok) -> Response {
        struct Login {
            var chrome: Chrome
            var csrf: String
        }
        // A sign-in form carries a token its cookie repeats (a form posted from another site has neither).
        let token = DashboardSessions.token()
        var response = html("login", Login(chrome: Self.chrome("Sign in", nil, error: error), csrf: token), status: status)
        response.setCookie(Self.cookie(Self.loginCookie, token, maxAge: 3_600, request))
        return response
    }

    func signIn(_ request: Request) async throws -> Response {
        let form: [String: String]
        do {
            form = try await Self.form(request)
        } catch let error as APIError {
            return loginPage(request, error: error.message, status: error.status)
        }
        guard let token = form["csrf"], let expected = request.cookies[Self.loginCookie]?.value, Self.same(token, expected) else {
            return loginPage(request, error: "The sign-in form expired or came from elsewhere: sign in again.", status: .forbidden)
        }
        let key = (form["key"] ?? "").trimmingCharacters(in: .whitespaces)
        guard let identity = keysByHash[ServerConfiguration.hash(apiKey: Substring(key))] else {
            logger.info("dashboard sign-in refused: not a support or admin key")
            return loginPage(request, error: "That is not a support or admin API key of this server.", status: .unauthorized)
        }
        if let (old, _) = session(request) { sessions.end(old) }
        let (id, _) = sessions.start(identity)
        logger.info("dashboard sign-in", metadata: ["api_key": .string(identity.name)])
        var response = Self.redirect("/dashboard")
        response.setCookie(Self.cookie(Self.sessionCookie, id, maxAge: Int(sessions.absoluteLimit.components.seconds), request))
        response.setCookie(Self.cookie(Self.loginCookie, "", maxAge: 0, request))
        return response
    }

    func signOut(_ id: String) -> Response {
        sessions.end(id)
        var response = Self.redirect("/dashboard/login")
        response.headers[.setCookie] = "\(Self.sessionCookie)=; Max-Age=0; Path=/dashboard; HttpOnly; SameSite=Strict"
        return response
    }
}
