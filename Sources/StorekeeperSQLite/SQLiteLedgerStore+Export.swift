import AppStoreModels
import Foundation
import GRDB
package import StorekeeperCore

/// The whole ledger in pages (``LedgerExporting``), read by primary key so that a page never holds a record twice.
/// Pages are separate reads: copy a ledger that no server is writing.
extension SQLiteLedgerStore: LedgerExporting {
    package func exportPages(pageSize: Int, _ body: (LedgerPage) async throws -> Void) async throws {
        let size = max(1, pageSize)
        // Transactions (with their families' links and subscription records), family by family.
        var after: (String, String) = ("", "")
        while true {
            let last = after
            let families = try await readPage { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT DISTINCT environment, original_transaction_id FROM transactions
                        WHERE (environment, original_transaction_id) > (?, ?) ORDER BY environment, original_transaction_id LIMIT ?
                        """, arguments: [last.0, last.1, size]
                ).map { row in
                    LedgerKey(AppStoreEnvironment(rawValue: row["environment"]), row["original_transaction_id"])
                }
            }
            guard let final = families.last else { break }
            after = (final.environment.rawValue, final.id)
            let ledger = try await self.ledger(families: families)
            var page = LedgerPage()
            page.transactions = ledger.transactions.values.sorted { $0.info.transactionId < $1.info.transactionId }
            page.subscriptions = ledger.subscriptions.values.sorted { $0.key < $1.key }
            page.links = ledger.explicitLinks
            try await body(page)
        }
        // Subscriptions and links without a transaction (none are written so, but a copy leaves nothing behind).
        let orphans = try await readPage { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT environment, original_transaction_id FROM subscriptions s WHERE NOT EXISTS (SELECT 1 FROM transactions t
                        WHERE t.environment = s.environment AND t.original_transaction_id = s.original_transaction_id)
                    UNION SELECT environment, original_transaction_id FROM customer_links l WHERE NOT EXISTS (SELECT 1 FROM transactions t
                        WHERE t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id)
                    """
            ).map { row in LedgerKey(AppStoreEnvironment(rawValue: row["environment"]), row["original_transaction_id"]) }
        }
        if !orphans.isEmpty {
            let ledger = try await self.ledger(families: orphans)
            var page = LedgerPage()
            page.subscriptions = Array(ledger.subscriptions.values)
            page.links = ledger.explicitLinks
            try await body(page)
        }
        // Token owners, notifications, refused requests, watermarks.
        var page = LedgerPage()
        page.tokenOwners = try await readPage { db in
            var owners: [AppAccountTokenKey: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT * FROM token_owners") {
                let environment = AppStoreEnvironment(rawValue: row["environment"])
                guard let token = LowercaseUUID(uuidString: row["token"]) else { continue }
                owners[AppAccountTokenKey(bundleId: row["bundle_id"], environment: environment, token: token)] = row["customer_id"]
            }
            return owners
        }
        page.issuedTokens = try await readPage { db in
            try Row.fetchAll(db, sql: "SELECT * FROM issued_tokens").compactMap { row in
                LowercaseUUID(uuidString: row["token"]).map { token in
                    IssuedToken(
                        bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), customerId: row["customer_id"],
                        token: token, issuedAt: Date(epochMilliseconds: row["issued_at"]))
                }
            }
        }
        page.erasedTokens = try await readPage { db in
            var erased: [AppAccountTokenKey: Date] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT * FROM erased_tokens") {
                guard let token = LowercaseUUID(uuidString: row["token"]) else { continue }
                let key = AppAccountTokenKey(bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), token: token)
                erased[key] = Date(epochMilliseconds: row["erased_at"])
            }
            return erased
        }
        page.refused = try await refusedNotifications()
        page.watermarks = try await readPage { db in
            try Row.fetchAll(db, sql: "SELECT * FROM recovery_watermarks").map { row in
                RecoveryWatermark(
                    app: VerifierKey(bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"])),
                    date: Date(epochMilliseconds: row["watermark"])
                )
            }
        }
        try await body(page)
        var lastUUID = ""
        while true {
            let from = lastUUID
            let notifications = try await readPage { db in
                try Row.fetchAll(db, sql: "SELECT * FROM notifications WHERE uuid > ? ORDER BY uuid LIMIT ?", arguments: [from, size]).map { row in
                    KeptNotification(
                        notificationUUID: row["uuid"], notificationType: NotificationType(rawValue: row["type"]),
                        subtype: (row["subtype"] as String?).map(NotificationSubtype.init(rawValue:)),
                        signedDate: (row["signed_date"] as Int64?).map(Date.init(epochMilliseconds:)),
                        environment: (row["environment"] as String?).map(AppStoreEnvironment.init(rawValue:)), outcome: row["outcome"],
                        receivedAt: Date(epochMilliseconds: row["received_at"]), signedPayload: try self.headers.jws(row, "jws", db, nil)
                    )
                }
            }
            guard let final = notifications.last else { break }
            lastUUID = final.notificationUUID
            var page = LedgerPage()
            page.notifications = notifications
            try await body(page)
        }
        // The outbox: events by position, then customers' states, endpoints and deliveries.
        var position: Int64 = 0
        while true {
            let events = try await self.events(after: position, limit: size, filter: EventFilter())
            guard let final = events.last else { break }
            position = final.position
            var page = LedgerPage()
            page.events = events
            try await body(page)
        }
        var outbox = LedgerPage()
        outbox.customerStates = try await readPage { db in
            try Row.fetchAll(db, sql: "SELECT * FROM customer_states").map { row in
                CustomerStateRecord(
                    customer: CustomerKey(
                        bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), customerId: row["customer_id"]),
                    sequence: row["sequence"], state: row["state"], validUntil: (row["valid_until"] as Int64?).map(Date.init(epochMilliseconds:)))
            }
        }
        outbox.endpoints = try await readPage { db in
            try Row.fetchAll(db, sql: "SELECT * FROM webhook_endpoints").map { row in
                CopiedEndpoint(name: row["name"], cursor: row["cursor"], failingSince: row["failing_since"], failingReason: row["failing_reason"])
            }
        }
        outbox.deliveries = try await readPage { db in
            try Row.fetchAll(db, sql: "SELECT * FROM deliveries").map { row in
                CopiedDelivery(
                    endpoint: row["endpoint"], position: row["position"],
                    customer: CustomerKey(
                        bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), customerId: row["customer_id"]),
                    sequence: row["sequence"], status: row["status"], attempts: row["attempts"], nextAttemptAt: row["next_attempt_at"],
                    createdAt: row["created_at"], finishedAt: row["finished_at"])
            }
        }
        if outbox.count > 0 { try await body(outbox) }
        // Attempts, in the order they were made, a page at a time (an endpoint that failed long has many).
        var lastAttempt: Int64 = 0
        while true {
            let after = lastAttempt
            let rows = try await readPage { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT id, endpoint, position, attempted_at, status_code, latency_ms, error, response_excerpt FROM delivery_attempts
                        WHERE id > ? ORDER BY id LIMIT ?
                        """, arguments: [after, size]
                ).map { row -> (Int64, CopiedAttempt) in
                    let attempt = DeliveryAttempt(
                        attemptedAt: Date(epochMilliseconds: row["attempted_at"]), statusCode: row["status_code"],
                        latencyMilliseconds: row["latency_ms"], error: row["error"], responseExcerpt: row["response_excerpt"])
                    return (row["id"], CopiedAttempt(endpoint: row["endpoint"], position: row["position"], attempt: attempt))
                }
            }
            guard let final = rows.last else { break }
            lastAttempt = final.0
            var page = LedgerPage()
            page.attempts = rows.map(\.1)
            try await body(page)
        }
        var lastAction: Int64 = 0
        while true {
            let after = lastAction
            let actions = try await readPage { db in
                try Row.fetchAll(db, sql: "SELECT * FROM support_actions WHERE id > ? ORDER BY id LIMIT ?", arguments: [after, size])
                    .map(Self.supportAction)
            }
            guard let final = actions.last else { break }
            lastAction = final.id
            var page = LedgerPage()
            page.supportActions = actions
            try await body(page)
        }
        var lastRequest = ""
        while true {
            let after = lastRequest
            let requests = try await readPage { db in
                try Row.fetchAll(db, sql: "SELECT * FROM consumption_requests WHERE uuid > ? ORDER BY uuid LIMIT ?", arguments: [after, size])
                    .map(Self.consumptionRequest)
            }
            guard let final = requests.last else { break }
            lastRequest = final.notificationUUID
            var page = LedgerPage()
            page.consumptionRequests = requests
            try await body(page)
        }
        var lastGrant = ""
        while true {
            let after = lastGrant
            let grants = try await readPage { db in
                try Row.fetchAll(db, sql: "SELECT * FROM promotional_grants WHERE id > ? ORDER BY id LIMIT ?", arguments: [after, size]).map(
                    Self.grant)
            }
            guard let final = grants.last else { break }
            lastGrant = final.id
            var page = LedgerPage()
            page.promotionalGrants = grants
            try await body(page)
        }
        var consents = LedgerPage()
        consents.consumptionConsents = try await readPage { db in
            try Row.fetchAll(db, sql: "SELECT * FROM consumption_consents ORDER BY bundle_id, environment, customer_id").map { row in
                CopiedConsent(
                    customer: CustomerKey(
                        bundleId: row["bundle_id"], environment: AppStoreEnvironment(rawValue: row["environment"]), customerId: row["customer_id"]),
                    consent: ConsumptionConsent(consented: row["consented"], at: Date(epochMilliseconds: row["at"])))
            }
        }
        if consents.count > 0 { try await body(consents) }
    }

    package func customers() async throws(StorageError) -> [CustomerScope] {
        try await readPage { db in
            var customers = Set<CustomerScope>()
            for row in try Row.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT l.customer_id, t.bundle_id, l.environment FROM customer_links l JOIN transactions t
                        ON t.environment = l.environment AND t.original_transaction_id = l.original_transaction_id
                    UNION SELECT customer_id, bundle_id, environment FROM token_owners
                    UNION SELECT customer_id, bundle_id, environment FROM promotional_grants
                    """)
            {
                let environment = AppStoreEnvironment(rawValue: row["environment"])
                guard let bundleId = row["bundle_id"] as String? else { continue }
                customers.insert(CustomerScope(customerId: row["customer_id"], bundleId: bundleId, environment: environment))
            }
            return customers.sorted()
        }
    }

    private func readPage<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(StorageError) -> T {
        do {
            return try await pool.read(body)
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError("read failed: \(error)", underlying: error)
        }
    }
}
