import AppStoreModels
import Foundation
import Hummingbird
import StorekeeperCore
import StorekeeperHTTP

/// The dashboard's pages: what each shows, from the support API's answers. Every value reaches the page through a
/// `{{…}}` tag, which escapes it for HTML; the chart alone is written as markup, from numbers only.
extension Dashboard {
    // MARK: - Overview

    func overview(_ session: DashboardSessions.Session) async throws -> Response {
        struct Row {
            var name: String
            var count: Int
        }
        struct Money {
            var currency: String
            var amount: String
        }
        struct App {
            var index: Int
            var bundleId: String
            var environment: String
            var active: Int
            var trials: Int
            var conversion: String
            var renewals: Int
            var churned: Int
            var billingRetry: Int
            var gracePeriod: Int
            var refunds: Int
            var newPurchases: Int
            var chart: String
            var products: [Row]
            var revenue: [Money]
        }
        struct Overview {
            var chrome: Chrome
            var now: String
            var apps: [App]
        }
        let now = support.now()
        var apps: [App] = []
        for (index, app) in support.apps(for: session.identity).enumerated() {
            let figures: SupportOverview
            do {
                figures = try await support.store.overview(app, since: now.addingTimeInterval(-30 * 86_400), now: now)
            } catch {
                throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
            }
            apps.append(
                App(
                    index: index, bundleId: app.bundleId, environment: app.environment.rawValue, active: figures.active, trials: figures.trials,
                    conversion: figures.trialConversionRate.map { String(format: "%.0f %%", $0 * 100) } ?? "–", renewals: figures.renewals,
                    churned: figures.churned, billingRetry: figures.billingRetry, gracePeriod: figures.gracePeriod, refunds: figures.refunds,
                    newPurchases: figures.newPurchases, chart: Self.chart(figures.purchasesPerDay),
                    products: figures.activeByProduct.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.map { Row(name: $0.key, count: $0.value) },
                    revenue: figures.revenue.sorted { $0.key < $1.key }.map {
                        Money(currency: $0.key, amount: String(format: "%.2f", Double($0.value) / 1_000))
                    }))
        }
        return html("overview", Overview(chrome: Self.chrome("Overview", session), now: Self.time(now), apps: apps))
    }

    /// Purchases per day as bars, in SVG drawn here from numbers alone (nothing else is written unescaped).
    static func chart(_ counts: [Int]) -> String {
        let highest = max(1, counts.max() ?? 1)
        let (width, height, gap) = (600.0, 120.0, 2.0)
        let bar = max(1, width / Double(max(1, counts.count)) - gap)
        var svg =
            ##"<svg class="chart" viewBox="0 0 600 140" role="img" aria-label="Purchases per day over the last \##(counts.count) days, at most \##(highest) a day" xmlns="http://www.w3.org/2000/svg">"##
        svg += ##"<line x1="0" y1="120.5" x2="600" y2="120.5" stroke="#aab2bf"/>"##
        for (day, count) in counts.enumerated() {
            let barHeight = Double(count) / Double(highest) * (height - 10)
            let x = Double(day) * (bar + gap)
            svg += String(
                format: ##"<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#0b5cad"><title>%d</title></rect>"##, x, height - barHeight, bar,
                barHeight, count)
        }
        svg +=
            ##"<text x="0" y="136" font-size="11" fill="#5b6472">30 days ago</text><text x="600" y="136" font-size="11" fill="#5b6472" text-anchor="end">today</text></svg>"##
        return svg
    }

    // MARK: - Search and customers

    func search(_ request: Request, _ session: DashboardSessions.Session) async throws -> Response {
        // A browser's GET form writes a space as "+"; no ID searched here holds one.
        let text = (request.uri.queryParameters.get("q") ?? "").replacingOccurrences(of: "+", with: " ").trimmingCharacters(in: .whitespaces)
        struct Match {
            var customerId: String
            var bundleId: String
            var environment: String
            var matchedBy: String
            var originalTransactionId: String
            var link: String
        }
        struct Found {
            var chrome: Chrome
            var query: String
            var matches: [Match]
            var warnings: [String]
        }
        guard !text.isEmpty, text.utf8.count <= 128, !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "search for a customer ID, a transaction ID, an app account token or an order ID (at most 128 characters)")
        }
        let found: SupportSearch.Result
        do {
            found = try await SupportSearch(store: support.store, apps: support.apps(for: session.identity), orderLookups: support.appStore)
                .searchWithOrders(text, budget: support.appStoreBudget)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be searched")
        }
        // One customer found: their page.
        if found.matches.count == 1, let only = found.matches.first {
            return Self.redirect(Self.customerLink(only.customerId, only.bundleId, only.environment))
        }
        let matches = found.matches.map {
            Match(
                customerId: $0.customerId, bundleId: $0.bundleId, environment: $0.environment.rawValue, matchedBy: $0.matchedBy,
                originalTransactionId: $0.originalTransactionId ?? "", link: Self.customerLink($0.customerId, $0.bundleId, $0.environment))
        }
        return html(
            "search", Found(chrome: Self.chrome("Search", session, query: text), query: text, matches: matches, warnings: found.lookupFailures))
    }

    /// A path segment, percent-encoded (customer IDs hold `@` and `:`, which a path may carry, but never `/`).
    static func segment(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    static func customerLink(_ customerId: String, _ bundleId: String, _ environment: AppStoreEnvironment) -> String {
        "/dashboard/customers/\(segment(customerId))?bundleId=\(segment(bundleId))&environment=\(environment.rawValue)"
    }

    /// The customer a page is about: the path's ID, the app and environment from the query as the support API takes them.
    func customerKey(_ request: Request, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) throws -> CustomerKey {
        let customerId = try CustomerAPI.customerId(context)
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: session.identity, support.configuration.apps)
        return CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId)
    }

    func customer(_ request: Request, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let key = try customerKey(request, context, session)
        let page = try await support.customerPage(key)
        let state = Self.object(page.state)
        let base = Self.customerLink(key.customerId, key.bundleId, key.environment)
        let query = base.split(separator: "?").last.map(String.init) ?? ""
        struct Entitlement {
            var name, productId, ownership, expires, renews, source: String
        }
        struct Subscription {
            var originalTransactionId, productId, status, expires, autoRenew: String
            var extendLink: String?
        }
        struct Purchase {
            var purchased, productId, transactionId, price, refunded, source: String
        }
        struct Event {
            var when, type, cause, changes: String
        }
        struct Action {
            var when, keyName, action, target, outcome, detail: String
        }
        struct Customer {
            var chrome: Chrome
            var customerId, bundleId, environment, consent: String
            var entitlements: [Entitlement]
            var subscriptions: [Subscription]
            var purchases: [Purchase]
            var refundsLink: String
            var timeline: [Event]
            var actions: [Action]
            var requests: [ConsumptionRow]
            var grants: [Grant]
            var grantLink: String
        }
        struct Grant {
            var entitlement, granted, grantedBy, reason, expires, state: String
            var revokeLink: String?
        }
        let text = Self.text
        let date = Self.date
        let entitlements = Self.objects(state["entitlements"]).map {
            Entitlement(
                name: text($0["entitlement"]), productId: $0["grantId"] == nil ? text($0["productId"]) : "promotional grant",
                ownership: text($0["ownership"]), expires: date($0["expiresDate"]), renews: text($0["willRenew"]), source: text($0["source"]))
        }
        let at = support.now()
        let grants = page.grants.reversed().map { grant in
            Grant(
                entitlement: grant.entitlement, granted: Self.time(grant.grantedAt), grantedBy: grant.grantedBy ?? "", reason: grant.reason ?? "",
                expires: Self.time(grant.expiresDate),
                state: grant.revokedAt.map { "revoked \(Self.time($0)) by \(grant.revokedBy ?? "")" }
                    ?? (grant.isActive(at: at) ? "active" : "expired"),
                revokeLink: grant.isActive(at: at)
                    ? "/dashboard/customers/\(Self.segment(key.customerId))/promotional-entitlements/\(grant.id)/revoke?\(query)" : nil)
        }
        let subscriptions = Self.objects(state["subscriptions"]).map { subscription in
            let original = text(subscription["originalTransactionId"])
            return Subscription(
                originalTransactionId: original, productId: text(subscription["productId"]), status: text(subscription["status"]),
                expires: date(subscription["expiresDate"]), autoRenew: text(subscription["autoRenew"]),
                extendLink: text(subscription["ownership"]) == "FAMILY_SHARED"
                    ? nil : "/dashboard/customers/\(Self.segment(key.customerId))/subscriptions/\(Self.segment(original))/extend?\(query)")
        }
        let purchases = page.purchases.reversed().map { purchase in
            let info = purchase.transaction
            return Purchase(
                purchased: Self.time(info.purchaseDate), productId: info.productId, transactionId: info.transactionId,
                price: info.price.map { String(format: "%.2f %@", Double($0) / 1_000, info.currency ?? "") } ?? "",
                refunded: info.revocationDate.map(Self.time) ?? "", source: purchase.source)
        }
        let timeline = page.events.reversed().map { event in
            let cause = event.draft.cause
            let described = [cause.kind.rawValue, cause.notificationType, cause.subtype, cause.id].compactMap { $0 }.joined(separator: " ")
            return Event(
                when: Self.time(event.draft.occurredAt), type: event.type.rawValue, cause: described,
                changes: SupportAction.text(event.draft.changes))
        }
        let actions = page.actions.reversed().map {
            Action(
                when: Self.time($0.at), keyName: $0.keyName, action: $0.action, target: $0.target ?? "", outcome: $0.outcome,
                detail: SupportAction.text($0.request.merging($0.detail) { $1 }))
        }
        return html(
            "customer",
            Customer(
                chrome: Self.chrome("Customer", session), customerId: key.customerId, bundleId: key.bundleId, environment: key.environment.rawValue,
                consent: page.consent.map { $0.consented ? "given (\(Self.time($0.at)))" : "refused (\(Self.time($0.at)))" } ?? "never asked",
                entitlements: entitlements, subscriptions: subscriptions, purchases: purchases,
                refundsLink: "/dashboard/customers/\(Self.segment(key.customerId))/refunds?\(query)", timeline: timeline, actions: actions,
                requests: page.consumptionRequests.map(Self.row), grants: Array(grants),
                grantLink: "/dashboard/customers/\(Self.segment(key.customerId))/promotional-entitlements/new?\(query)"))
    }

    func refunds(_ request: Request, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let key = try customerKey(request, context, session)
        struct Refund {
            var when, productId, transactionId, reason: String
        }
        struct Refunds {
            var chrome: Chrome
            var customerId: String
            var checked: Int
            var refunds: [Refund]
            var back: String
        }
        try await support.requireKnown(key)
        let (found, checked) = try await support.refundList(key)
        return html(
            "refunds",
            Refunds(
                chrome: Self.chrome("Refunds", session), customerId: key.customerId, checked: checked,
                refunds: found.map {
                    Refund(
                        when: $0.revocationDate.map(Self.time) ?? "", productId: $0.productId, transactionId: $0.transactionId,
                        reason: $0.revocationReason.map { "\($0.rawValue)" } ?? "")
                }, back: Self.customerLink(key.customerId, key.bundleId, key.environment)))
    }

    // MARK: - Extending a subscription

    func extendForm(_ request: Request, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let key = try customerKey(request, context, session)
        let original = context.pathValue("originalTransactionId")
        // The customer's state alone: the confirmation needs one subscription, not the timeline and audit log.
        let state = try await support.customerState(key)
        guard
            let subscription = Self.objects(Self.object(state)["subscriptions"]).first(where: {
                Self.text($0["originalTransactionId"]) == original
            })
        else {
            throw APIError(
                .notFound, .unknownSubscription, "customer '\(key.customerId)' has no subscription \(UntrustedText.quoted(original, limit: 64))")
        }
        struct Form {
            var chrome: Chrome
            var customerId, bundleId, environment, originalTransactionId, productId, expires, csrf, action, back: String
            var formToken = ""
        }
        var page = Form(
            chrome: Self.chrome("Extend", session), customerId: key.customerId, bundleId: key.bundleId, environment: key.environment.rawValue,
            originalTransactionId: original, productId: Self.text(subscription["productId"]), expires: Self.date(subscription["expiresDate"]),
            csrf: session.csrf, action: "/dashboard/customers/\(Self.segment(key.customerId))/subscriptions/\(Self.segment(original))/extend",
            back: Self.customerLink(key.customerId, key.bundleId, key.environment))
        page.formToken = DashboardSessions.formToken(action: page.action, csrf: session.csrf)
        return html("extend", page)
    }

    func extend(
        _ form: [String: String], _ sessionId: String, _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session
    ) async throws -> Response {
        let customerId = try CustomerAPI.customerId(context)
        let original = context.pathValue("originalTransactionId")
        guard let days = Int(form["days"] ?? ""), let reason = Int(form["reason"] ?? "") else {
            throw APIError(.badRequest, .invalidParameter, "give the days (1 to 90) and a reason")
        }
        let note = form["note"].flatMap { $0.isEmpty ? nil : $0 }
        try SupportAPI.checkExtension(days: days, reason: reason, note: note)
        try CustomerAPI.refuseOtherApp(session.identity, asked: form["bundleId"])
        let app = try CustomerAPI.app(for: session.identity, asked: form["bundleId"], support.configuration.apps)
        let environment = try QueryParameters.environment(form["environment"]) ?? app.defaultEnvironment
        guard app.environments.contains(environment) else {
            throw APIError(.badRequest, .unknownEnvironment, "app '\(app.bundleId)' does not accept environment \(environment.rawValue)")
        }
        let key = CustomerKey(bundleId: app.bundleId, environment: environment, customerId: customerId)
        try claimForm(form, session: sessionId)
        let action = try await support.performExtension(original, of: key, days: days, reason: reason, note: note, identity: session.identity)
        let until = action.detail["effectiveDate"].flatMap { value -> String? in
            if case .integer(let milliseconds) = value { return Self.time(Date(epochMilliseconds: milliseconds)) }
            return nil
        }
        return message(
            session, heading: "Extended",
            text: "The App Store extended subscription \(original) by \(days) days" + (until.map { ", to \($0)" } ?? "")
                + ". Audit record \(action.id). The timeline shows the change when Apple's RENEWAL_EXTENDED arrives.",
            link: Self.customerLink(key.customerId, key.bundleId, key.environment), linkText: "Back to the customer")
    }

    // MARK: - Consumption requests

    struct ConsumptionRow {
        var received, customerId, transactionId, reason, state, deadline, decidedBy: String
        var answerLink: String?
    }

    static func row(_ record: ConsumptionRequestRecord) -> ConsumptionRow {
        ConsumptionRow(
            received: time(record.receivedAt), customerId: record.customerId ?? "", transactionId: record.transactionId ?? "",
            reason: record.reason?.rawValue ?? "", state: record.state.rawValue, deadline: record.deadline.map(time) ?? "",
            decidedBy: record.decidedBy ?? "",
            answerLink: record.state == .manual ? "/dashboard/consumption-requests/\(segment(record.notificationUUID))/answer" : nil)
    }

    func consumption(_ request: Request, _ session: DashboardSessions.Session) async throws -> Response {
        let states = try SupportAPI.states(request.uri.queryParameters.get("state"))
        struct Listed {
            var chrome: Chrome
            var showing: String
            var requests: [ConsumptionRow]
        }
        let found: [ConsumptionRequestRecord]
        do {
            found = try await support.store.consumptionRequests(.apps(support.apps(for: session.identity), states: states, limit: 200))
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        return html(
            "consumption",
            Listed(
                chrome: Self.chrome("Consumption requests", session), showing: states.map(\.rawValue).joined(separator: ", "),
                requests: found.map(Self.row)))
    }

    func answerForm(_ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let uuid = context.pathValue("uuid")
        let record = try await support.consumptionRequest(uuid, identity: session.identity)
        struct Form {
            var chrome: Chrome
            var customerId, bundleId, environment, transactionId, productId, reason, deadline, csrf, action: String
        }
        return html(
            "answer",
            Form(
                chrome: Self.chrome("Answer", session), customerId: record.customerId ?? "", bundleId: record.bundleId ?? "",
                environment: record.environment?.rawValue ?? "", transactionId: record.transactionId ?? "", productId: record.productId ?? "",
                reason: record.reason?.rawValue ?? "", deadline: record.deadline.map(Self.time) ?? "", csrf: session.csrf,
                action: "/dashboard/consumption-requests/\(Self.segment(uuid))/answer"))
    }

    func answer(_ form: [String: String], _ context: StorekeeperRequestContext, _ session: DashboardSessions.Session) async throws -> Response {
        let uuid = context.pathValue("uuid")
        var percentage: Int?
        if let text = form["consumptionPercentage"], !text.isEmpty {
            guard let value = Double(text), (0...100).contains(value) else {
                throw APIError(.badRequest, .invalidParameter, "the consumed percentage is a number from 0 to 100")
            }
            percentage = Int((value * 1_000).rounded())
        }
        let answer = ConsumptionAnswer(
            deliveryStatus: DeliveryStatus(rawValue: form["deliveryStatus"] ?? ""), sampleContentProvided: form["sampleContentProvided"] == "true",
            refundPreference: form["refundPreference"].flatMap { $0.isEmpty ? nil : RefundPreference(rawValue: $0) },
            consumptionPercentage: percentage)
        let record = try await support.answer(uuid, with: answer, identity: session.identity)
        return message(
            session, heading: "Answer taken",
            text:
                "It is sent to the App Store within seconds (deadline \(record.deadline.map(Self.time) ?? "")); the customer's audit log records it.",
            link: "/dashboard/consumption-requests", linkText: "Back to the consumption requests")
    }

    // MARK: - Formatting

    /// The customer read's JSON, as values.
    static func object(_ buffer: ByteBuffer) -> [String: JSONValue] {
        (try? AppStoreJSON.makeDecoder().decode([String: JSONValue].self, from: Data(buffer.readableBytesView))) ?? [:]
    }

    static func objects(_ value: JSONValue?) -> [[String: JSONValue]] {
        guard case .array(let items) = value else { return [] }
        return items.compactMap { item in
            if case .object(let fields) = item { return fields }
            return nil
        }
    }

    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .string(let text): text
        case .bool(let flag): flag ? "yes" : "no"
        case .integer(let number): String(number)
        case .number(let number): String(number)
        default: ""
        }
    }

    /// Epoch milliseconds as ``time(_:)``.
    static func date(_ value: JSONValue?) -> String {
        if case .integer(let milliseconds) = value { return time(Date(epochMilliseconds: milliseconds)) }
        return ""
    }

    /// `2026-11-26 14:05 UTC`.
    static func time(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        return String(format: "%04d-%02d-%02d %02d:%02d UTC", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0, parts.hour ?? 0, parts.minute ?? 0)
    }
}
