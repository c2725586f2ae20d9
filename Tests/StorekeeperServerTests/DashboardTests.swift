import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A browser's requests, by hand: cookies kept, redirects not followed.
final class DashboardBrowser: @unchecked Sendable {
    // Safety: used by one test task at a time.
    let base: String
    var cookies: [String: String] = [:]
    static let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))

    init(base: String) { self.base = base }

    /// A fresh one-time form token, shaped as the server makes them (a form not sent before).
    static func newToken() -> String {
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255) }
        return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    struct Page {
        var status: Int
        var headers: HTTPHeaders
        var body: String
        var location: String? { headers.first(name: "Location") }
        /// The first form's CSRF token on the page.
        var csrf: String? { hidden("csrf") }
        /// The first form's one-time token (action forms).
        var formToken: String? { hidden("form") }

        func hidden(_ name: String) -> String? {
            guard let range = body.range(of: #"name="\#(name)" value=""#) else { return nil }
            return String(body[range.upperBound...].prefix { $0 != "\"" })
        }
    }

    func request(_ method: HTTPMethod, _ path: String, form: [(String, String)]? = nil, headers: [(String, String)] = []) async throws -> Page {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        if !cookies.isEmpty { request.headers.add(name: "Cookie", value: cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")) }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let form {
            let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
            let body = form.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&")
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await Self.client.execute(request, timeout: .seconds(30))
        for header in response.headers[canonicalForm: "Set-Cookie"] {
            let pair = header.split(separator: ";")[0].split(separator: "=", maxSplits: 1)
            let (name, value) = (String(pair[0]), pair.count > 1 ? String(pair[1]) : "")
            cookies[name] = value.isEmpty ? nil : value
        }
        let body = try await response.body.collect(upTo: 1 << 22)
        return Page(status: Int(response.status.code), headers: response.headers, body: String(buffer: body))
    }

    /// Signs in with `key`; the overview page.
    func signIn(_ key: String) async throws -> Page {
        let login = try await request(.GET, "/dashboard/login")
        let signedIn = try await request(.POST, "/dashboard/login", form: [("csrf", login.csrf ?? ""), ("key", key)])
        #expect(signedIn.status == 303 && signedIn.location == "/dashboard", "\(signedIn.status) \(signedIn.body)")
        return try await request(.GET, "/dashboard")
    }
}

@Suite("Storekeeper server: the support dashboard")
struct DashboardTests {
    typealias T = RecoveryTestbed

    /// bob bought pro.monthly at the simulator and the app submitted it: his purchase.
    static func bobSubscribed(_ testbed: RecoveryTestbed, _ base: String) async throws -> LifecycleEngine.PurchaseResult {
        let bob = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
            try engine.createCustomer(id: "apple-bob")
            return try engine.purchase(.init(customerId: "apple-bob", productId: "pro.monthly"))
        }
        #expect(try await T.submit(bob.signedTransaction, for: "bob", to: base) == 200)
        return bob
    }

    @Test(
        "sessions: signed out, every page sends to sign-in; only support and admin keys sign in; cookies are HttpOnly, SameSite=Strict, Secure behind TLS; a form without its CSRF token is refused and changes nothing"
    )
    func sessions() async throws {
        try await T.serving(.sandbox) { testbed, base in
            let bob = try await Self.bobSubscribed(testbed, base)
            let browser = DashboardBrowser(base: base)
            for path in ["/dashboard", "/dashboard/customers/bob", "/dashboard/search?q=bob", "/dashboard/consumption-requests"] {
                let page = try await browser.request(.GET, path)
                #expect(page.status == 303 && page.location == "/dashboard/login", "\(path): \(page.status)")
            }
            let login = try await browser.request(.GET, "/dashboard/login")
            #expect(login.status == 200 && login.headers.first(name: "Content-Type") == "text/html; charset=utf-8")
            let policy = login.headers.first(name: "Content-Security-Policy") ?? ""
            #expect(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"), "\(policy)")
            let loginCookie = login.headers[canonicalForm: "Set-Cookie"].first { $0.hasPrefix("storekeeper_login=") } ?? ""
            #expect(loginCookie.contains("HttpOnly") && loginCookie.contains("SameSite=Strict") && !loginCookie.contains("Secure"), "\(loginCookie)")
            let csrf = try #require(login.csrf)

            // A sign-in posted from elsewhere (no cookie), an app key, a wrong key: refused, no session.
            let elsewhere = DashboardBrowser(base: base)
            #expect(try await elsewhere.request(.POST, "/dashboard/login", form: [("csrf", csrf), ("key", T.supportKey)]).status == 403)
            var token = csrf
            for (key, status) in [(T.appKey, 401), ("nope", 401)] {
                let refused = try await browser.request(.POST, "/dashboard/login", form: [("csrf", token), ("key", key)])
                token = refused.csrf ?? ""
                #expect(refused.status == status && browser.cookies["storekeeper_session"] == nil, "\(refused.status)")
                #expect(!refused.body.contains(T.appKey), "a key is never echoed")
            }
            // Behind TLS (the proxy says so), the session cookie is Secure.
            let fresh = try await browser.request(.GET, "/dashboard/login")
            let signedIn = try await browser.request(
                .POST, "/dashboard/login", form: [("csrf", fresh.csrf ?? ""), ("key", T.supportKey)], headers: [("X-Forwarded-Proto", "https")])
            #expect(signedIn.status == 303)
            let sessionCookie = signedIn.headers[canonicalForm: "Set-Cookie"].first { $0.hasPrefix("storekeeper_session=") } ?? ""
            for attribute in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/dashboard"] {
                #expect(sessionCookie.contains(attribute), "\(attribute) in \(sessionCookie)")
            }
            let overview = try await browser.request(.GET, "/dashboard")
            #expect(overview.status == 200 && overview.body.contains("Active subscribers") && overview.body.contains("<svg"), "\(overview.status)")
            let figures = try await T.call(.GET, base + "/v1/support/overview?environment=Sandbox&days=7", key: T.supportKey)
            #expect(figures.status == 200 && figures.json["active"] as? Int == 1 && figures.json["newPurchases"] as? Int == 1, "\(figures.json)")
            #expect((figures.json["purchasesPerDay"] as? [Int])?.count == 7)
            // Filters and searches are checked as the API checks them: a named 400 page, nothing echoed raw.
            let badState = try await browser.request(.GET, "/dashboard/consumption-requests?state=%3Cb%3E")
            #expect(badState.status == 400 && badState.body.contains("&lt;b&gt;") && !badState.body.contains("<b>"), "\(badState.status)")
            let spaced = try await browser.request(.GET, "/dashboard/search?q=+bob+")
            #expect(spaced.status == 303 && spaced.location?.hasPrefix("/dashboard/customers/bob?") == true, "a form's + is a space")
            #expect(try await browser.request(.GET, "/dashboard/search?q=b%00ob").status == 400)

            // A forged POST: the session's cookie, no CSRF token (or another's): refused, nothing done.
            let extend = "/dashboard/customers/bob/subscriptions/\(bob.originalTransactionId)/extend"
            for form in [[("days", "7"), ("reason", "3")], [("days", "7"), ("reason", "3"), ("csrf", csrf)]] {
                let forged = try await browser.request(.POST, extend, form: form + [("environment", "Sandbox")])
                #expect(forged.status == 403 && forged.body.contains("security token"), "\(forged.status)")
            }
            #expect(try await testbed.simulator.read { $0.state.subscriptions[bob.originalTransactionId]?.extensionDates.isEmpty } == true)
            #expect(
                (try await T.call(.GET, base + "/v1/support/customers/bob?environment=Sandbox", key: T.supportKey).json["actions"] as? [Any])?.isEmpty
                    == true)
            // Signed out: the session is gone, and a POST without one goes to sign-in.
            let out = try await browser.request(.POST, "/dashboard/logout", form: [("csrf", overview.csrf ?? "")])
            #expect(out.status == 303 && out.location == "/dashboard/login")
            browser.cookies["storekeeper_session"] = sessionCookie.split(separator: ";")[0].split(separator: "=").last.map(String.init)
            #expect(try await browser.request(.GET, "/dashboard").status == 303, "the ended session no longer opens the dashboard")
            #expect(try await browser.request(.POST, extend, form: [("days", "7"), ("reason", "3")]).location == "/dashboard/login")
        }
    }

    @Test("HTML and script in searches, product IDs and notes are shown as text: every value is escaped")
    func escaping() async throws {
        try await T.serving(.sandbox) { testbed, base in
            // A transaction whose product ID is markup, signed by the simulator's authority (the server trusts it).
            let bob = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "apple-mallory")
                return try engine.purchase(.init(customerId: "apple-mallory", productId: "unlock.lifetime"))
            }
            let decoded = try UnverifiedJWS.unsafeDecode(bob.signedTransaction).payload
            guard case .object(var fields) = decoded else { throw CancellationError() }
            let hostile = #"<img src=x onerror="alert(1)">"#
            fields["productId"] = .string(hostile)
            fields["transactionId"] = .string("990000000000001")
            fields["originalTransactionId"] = .string("990000000000001")
            let signer = try testbed.simulatorDirectory.loadAuthority().makeSigner()
            let jws = try signer.sign(JSONValue.object(fields))
            #expect(try await T.submit(jws, for: "mallory", to: base) == 200)
            let browser = DashboardBrowser(base: base)
            _ = try await browser.signIn(T.supportKey)
            let page = try await browser.request(.GET, "/dashboard/customers/mallory?environment=Sandbox")
            #expect(page.status == 200)
            #expect(!page.body.contains(hostile) && page.body.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"), "the product ID is escaped")
            let search = try await browser.request(.GET, "/dashboard/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E")
            #expect(
                !search.body.contains("<script>alert(1)") && search.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
                "\(search.body.prefix(200))")
            #expect(!search.body.contains("<script"), "no script anywhere on a dashboard page")
        }
        // The templates write every value escaped: `{{{…}}}` (unescaped) only for the chart, drawn from numbers.
        let templates = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Sources/StorekeeperServer/Resources/Dashboard")
        for file in try FileManager.default.contentsOfDirectory(atPath: templates.path) where file.hasSuffix(".mustache") {
            let text = try String(contentsOf: templates.appendingPathComponent(file), encoding: .utf8)
            let unescaped =
                text.components(separatedBy: "{{{").dropFirst().map { $0.prefix { $0 != "}" } }
                + text.components(separatedBy: "{{&").dropFirst().map { $0.prefix { $0 != "}" } }
            #expect(unescaped.allSatisfy { $0 == "chart" }, "\(file): \(unescaped)")
        }
    }

    @Test(
        "promotional entitlements from the customer page: granted and revoked behind a confirmation with a reason, refused without the CSRF token, shown escaped, in the entitlements and the audit log"
    )
    func promotionalGrants() async throws {
        try await T.serving(.sandbox) { testbed, base in
            _ = try await Self.bobSubscribed(testbed, base)
            let browser = DashboardBrowser(base: base)
            _ = try await browser.signIn(T.supportKey)
            let customer = try await browser.request(.GET, "/dashboard/customers/bob?environment=Sandbox")
            #expect(customer.status == 200 && customer.body.contains("Promotional entitlements"), "\(customer.status)")
            let link = try #require(
                customer.body.range(of: #"/dashboard/customers/bob/promotional-entitlements/new?[^"]*"#, options: .regularExpression))
            let form = try await browser.request(.GET, String(customer.body[link]).replacingOccurrences(of: "&amp;", with: "&"))
            #expect(form.status == 200 && form.body.contains("Confirm: grant"), "\(form.status)")
            let action = "/dashboard/customers/bob/promotional-entitlements"
            let fields = [("entitlement", "beta"), ("days", "14"), ("reason", #"<script>alert("x")</script> goodwill"#), ("environment", "Sandbox")]
            let forged = try await browser.request(.POST, action, form: fields)
            #expect(forged.status == 403, "no CSRF token: refused")
            let badDays = try await browser.request(
                .POST, action, form: [("csrf", form.csrf ?? "")] + fields.filter { $0.0 != "days" } + [("days", "0")])
            #expect(badDays.status == 400 && badDays.body.contains("days must be 1-3650"), "\(badDays.status)")
            let sent = [("csrf", form.csrf ?? ""), ("form", form.formToken ?? "")] + fields
            let granted = try await browser.request(.POST, action, form: sent)
            #expect(granted.status == 200 && granted.body.contains("has beta until"), "\(granted.status) \(granted.body.suffix(300))")
            // The same form again (a reload, a double click): refused, nothing granted twice.
            let replayed = try await browser.request(.POST, action, form: sent)
            #expect(replayed.status == 409 && replayed.body.contains("sent already"), "\(replayed.status)")
            // A form token is its form's: made up, or taken from bob's grant form and posted to alice's, it is refused.
            let madeUp = try await browser.request(.POST, action, form: [("csrf", form.csrf ?? ""), ("form", DashboardBrowser.newToken())] + fields)
            #expect(madeUp.status == 403 && madeUp.body.contains("not valid, or is another form"), "\(madeUp.status)")
            let withoutToken = try await browser.request(.POST, action, form: [("csrf", form.csrf ?? "")] + fields)
            #expect(withoutToken.status == 403 && withoutToken.body.contains("carries no one-time token"), "\(withoutToken.status)")
            let fresh = try await browser.request(.GET, String(customer.body[link]).replacingOccurrences(of: "&amp;", with: "&"))
            let elsewhere = try await browser.request(
                .POST, "/dashboard/customers/alice/promotional-entitlements",
                form: [("csrf", fresh.csrf ?? ""), ("form", fresh.formToken ?? "")] + fields)
            #expect(elsewhere.status == 403 && elsewhere.body.contains("another form"), "\(elsewhere.status)")
            // A one-app key of another app, named in the form: refused, not done in its own app.
            let otherApp = try await browser.request(
                .POST, action, form: [("csrf", fresh.csrf ?? ""), ("form", fresh.formToken ?? "")] + fields + [("bundleId", "com.example.nope")])
            #expect(otherApp.status == 403 || otherApp.status == 404 || otherApp.status == 400, "\(otherApp.status)")
            let state = try await T.call(.GET, base + "/v1/customers/bob?environment=Sandbox", key: T.appKey)
            let promotional = ((state.json["entitlements"] as? [[String: Any]]) ?? []).filter { $0["source"] as? String == "promotional" }
            #expect(promotional.count == 1 && promotional.first?["entitlement"] as? String == "beta", "\(state.json)")
            let id = try #require(promotional.first?["grantId"] as? String)

            let after = try await browser.request(.GET, "/dashboard/customers/bob?environment=Sandbox")
            #expect(!after.body.contains("<script>") && after.body.contains("&lt;script&gt;"), "the reason is shown as text")
            #expect(after.body.contains("promotional.granted") && after.body.contains("grant-promotional-entitlement"))
            let revokeLink = "/dashboard/customers/bob/promotional-entitlements/\(id)/revoke"
            #expect(after.body.contains(revokeLink))
            let confirm = try await browser.request(.GET, revokeLink + "?environment=Sandbox")
            let secondConfirm = try await browser.request(.GET, revokeLink + "?environment=Sandbox")
            #expect(confirm.status == 200 && confirm.body.contains("Confirm: revoke") && confirm.body.contains("beta"), "\(confirm.status)")
            #expect(try await browser.request(.POST, revokeLink, form: [("reason", "oops"), ("environment", "Sandbox")]).status == 403)
            let revoked = try await browser.request(
                .POST, revokeLink,
                form: [
                    ("csrf", confirm.csrf ?? ""), ("form", confirm.formToken ?? ""), ("reason", "granted to the wrong person"),
                    ("environment", "Sandbox"),
                ])
            #expect(revoked.status == 200 && revoked.body.contains("no longer has beta"), "\(revoked.status)")
            let again = try await browser.request(
                .POST, revokeLink,
                form: [("csrf", confirm.csrf ?? ""), ("form", secondConfirm.formToken ?? ""), ("reason", "twice"), ("environment", "Sandbox")])
            #expect(again.status == 409, "\(again.status)")
            let revokedPage = try await browser.request(.GET, revokeLink + "?environment=Sandbox")
            #expect(revokedPage.status == 409 && !revokedPage.body.contains("Confirm: revoke"), "a revoked grant offers no form")
            #expect(try await browser.request(.GET, "/dashboard/customers/bob/promotional-entitlements/..%2Fx/revoke").status == 400)
            let final = try await browser.request(.GET, "/dashboard/customers/bob?environment=Sandbox")
            #expect(final.body.contains("revoked") && final.body.contains("promotional.revoked") && !final.body.contains(revokeLink))
            let nobody = try await browser.request(.GET, "/dashboard/customers/nobody/promotional-entitlements/new?environment=Sandbox")
            #expect(nobody.status == 404)
        }
    }

    /// Whether python3 with Playwright and a Chromium are installed (`.ci/run` installs them).
    static let browserAvailable =
        ExternalTool.succeeds(["python3", "-c", "import playwright"]) && FileManager.default.isExecutableFile(atPath: chromium)

    static let chromium = ProcessInfo.processInfo.environment["STOREKEEPER_CHROMIUM"] ?? "/usr/bin/chromium"

    /// Runs the browser script's `phase`; its output (one line per check) and whether it passed.
    static func runBrowser(_ phase: String, base: String, orderId: String, screenshots: URL) async throws -> (output: String, passed: Bool) {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Browser/dashboard_flow.py")
        // The key by the environment, not the command line (which `ps` shows).
        return try await ExternalTool.run(
            ["python3", script.path, phase],
            environment: [
                "DASHBOARD_URL": base, "DASHBOARD_KEY": T.supportKey, "ORDER_ID": orderId, "CUSTOMER_ID": "bob", "SCREENSHOTS": screenshots.path,
                "CHROMIUM": chromium,
            ])
    }

    @Test(
        "in a real browser: sign in, search an order ID, open the customer, extend the subscription after confirming, see the audit entry and RENEWAL_EXTENDED's effect; screenshots kept",
        .enabled(
            if: browserAvailable,
            "python3 with Playwright and Chromium are not installed (pip install playwright; apt-get install chromium; .ci/run does)")
    )
    func browserFlow() async throws {
        // Where the screenshots go: STOREKEEPER_SCREENSHOTS (the docs' are made so), or the build directory's artifacts.
        let screenshots = URL(
            fileURLWithPath: ProcessInfo.processInfo.environment["STOREKEEPER_SCREENSHOTS"]
                ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../.build/dashboard-screenshots").path)
        try FileManager.default.createDirectory(at: screenshots, withIntermediateDirectories: true)
        try await T.serving(.production) { testbed, base in
            let bob = try await testbed.simulator.perform { (engine) throws(SimulatorError) in
                for name in ["apple-bob", "apple-amy", "apple-cy"] { try engine.createCustomer(id: name) }
                _ = try engine.purchase(.init(customerId: "apple-amy", productId: "pro.monthly", offerId: "intro.trial"))
                _ = try engine.purchase(.init(customerId: "apple-cy", productId: "coins.100"))
                return try engine.purchase(.init(customerId: "apple-bob", productId: "pro.monthly"))
            }
            #expect(try await T.submit(bob.signedTransaction, for: "bob", to: base) == 200)
            await testbed.deliverer.deliverDue()
            let orderId = try #require(await testbed.simulator.state.transactions[bob.transactionId]?.orderId)
            let extend = try await Self.runBrowser("extend", base: base, orderId: orderId, screenshots: screenshots)
            #expect(extend.passed, "\(extend.output)")
            // Apple's RENEWAL_EXTENDED reaches the server.
            await testbed.deliverer.deliverDue()
            let verify = try await Self.runBrowser("verify", base: base, orderId: orderId, screenshots: screenshots)
            #expect(verify.passed, "\(verify.output)")
            for name in [
                "dashboard-sign-in", "dashboard-overview", "dashboard-customer", "dashboard-extend", "dashboard-customer-after",
                "dashboard-customer-phone", "dashboard-grant",
            ] {
                let size =
                    (try? FileManager.default.attributesOfItem(atPath: screenshots.appendingPathComponent(name + ".png").path)[.size] as? Int) ?? 0
                #expect(size > 1_000, "screenshot \(name).png")
            }
        }
    }
}
