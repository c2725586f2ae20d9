package import AppStoreModels
package import Foundation

/// A ledger's contents in pages, for moving it to another backend (`storekeeper copy`, SQLite to PostgreSQL). Each
/// page is whole records; a notification keeps when it was received, and its raw payload when not pruned.
package struct LedgerPage: Sendable {
    package var transactions: [LedgerTransaction] = []
    package var subscriptions: [LedgerSubscription] = []
    package var links: [LedgerKey: String] = [:]
    package var tokenOwners: [AppAccountTokenKey: String] = [:]
    package var notifications: [KeptNotification] = []
    package var refused: [RefusedNotification] = []
    package var watermarks: [RecoveryWatermark] = []
    package var issuedTokens: [IssuedToken] = []
    /// Tokens retired by customers' erasures, and when.
    package var erasedTokens: [AppAccountTokenKey: Date] = [:]
    /// The outbox: events (with their positions and IDs), customers' recorded states, webhook endpoints' places in
    /// the outbox and failing marks, and deliveries (so that a move loses no undelivered event and no sequence restarts).
    package var events: [LedgerEvent] = []
    package var customerStates: [CustomerStateRecord] = []
    package var endpoints: [CopiedEndpoint] = []
    package var deliveries: [CopiedDelivery] = []
    /// Deliveries' attempts, oldest first.
    package var attempts: [CopiedAttempt] = []
    /// The support audit log, oldest first.
    package var supportActions: [SupportAction] = []
    /// Consumption requests (what became of each) and customers' consents.
    package var consumptionRequests: [ConsumptionRequestRecord] = []
    package var consumptionConsents: [CopiedConsent] = []
    /// Promotional grants, revoked and expired ones too.
    package var promotionalGrants: [PromotionalGrant] = []

    package init() {}

    /// Records in the page.
    package var count: Int {
        transactions.count + subscriptions.count + links.count + tokenOwners.count + notifications.count + refused.count + watermarks.count
            + issuedTokens.count + erasedTokens.count + events.count + customerStates.count + endpoints.count + deliveries.count + attempts.count
            + supportActions.count + consumptionRequests.count + consumptionConsents.count + promotionalGrants.count
    }
}

/// A customer's consent to sharing, as copied.
package struct CopiedConsent: Sendable, Hashable {
    package var customer: CustomerKey
    package var consent: ConsumptionConsent

    package init(customer: CustomerKey, consent: ConsumptionConsent) {
        self.customer = customer
        self.consent = consent
    }
}

/// A webhook endpoint's row, as copied.
package struct CopiedEndpoint: Sendable, Hashable {
    package var name: String
    package var cursor: Int64
    package var failingSince: Int64?
    package var failingReason: String?

    package init(name: String, cursor: Int64, failingSince: Int64?, failingReason: String?) {
        self.name = name
        self.cursor = cursor
        self.failingSince = failingSince
        self.failingReason = failingReason
    }
}

/// A delivery's row, as copied (its attempts are ``CopiedAttempt``s; a claim is not copied).
package struct CopiedDelivery: Sendable, Hashable {
    package var endpoint: String
    package var position: Int64
    package var customer: CustomerKey
    package var sequence: Int64
    package var status: String
    package var attempts: Int
    package var nextAttemptAt: Int64
    package var createdAt: Int64
    package var finishedAt: Int64?

    package init(
        endpoint: String, position: Int64, customer: CustomerKey, sequence: Int64, status: String, attempts: Int, nextAttemptAt: Int64,
        createdAt: Int64, finishedAt: Int64?
    ) {
        self.endpoint = endpoint
        self.position = position
        self.customer = customer
        self.sequence = sequence
        self.status = status
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.createdAt = createdAt
        self.finishedAt = finishedAt
    }
}

/// One attempt of a delivery, as copied.
package struct CopiedAttempt: Sendable, Hashable {
    package var endpoint: String
    package var position: Int64
    package var attempt: DeliveryAttempt

    package init(endpoint: String, position: Int64, attempt: DeliveryAttempt) {
        self.endpoint = endpoint
        self.position = position
        self.attempt = attempt
    }
}

/// A notification as the ledger keeps it, with when it was received; `signedPayload` is `nil` once pruned.
package struct KeptNotification: Sendable, Hashable {
    package var notificationUUID: String
    package var notificationType: NotificationType
    package var subtype: NotificationSubtype?
    package var signedDate: Date?
    package var environment: AppStoreEnvironment?
    package var outcome: ApplyOutcome
    package var receivedAt: Date
    package var signedPayload: String?

    package init(
        notificationUUID: String, notificationType: NotificationType, subtype: NotificationSubtype?, signedDate: Date?,
        environment: AppStoreEnvironment?, outcome: ApplyOutcome, receivedAt: Date, signedPayload: String?
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDate = signedDate
        self.environment = environment
        self.outcome = outcome
        self.receivedAt = receivedAt
        self.signedPayload = signedPayload
    }
}
