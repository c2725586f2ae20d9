package import AppStoreModels
package import Foundation

/// One `CONSUMPTION_REQUEST` and what became of it. The ledger creates the record (state ``State/new``) in the
/// transaction that stores the notification, whichever way it came (the webhook, recovery, a copy); the
/// ``ConsumptionResponder`` job decides and answers it.
package struct ConsumptionRequestRecord: Sendable, Hashable, Encodable {
    package enum State: String, Sendable, Hashable, Codable, CaseIterable {
        /// Stored with its notification, not decided yet.
        case new
        /// Decided: its answer is to be sent (at ``ConsumptionRequestRecord/nextAttemptAt``).
        case pending
        /// Waits for a person (the support API), until the deadline.
        case manual
        /// Apple accepted the answer (202).
        case sent
        /// Not answered: the customer has not consented to sharing (Apple asks for no answer then).
        case notConsented = "not-consented"
        /// Not answered: the policy said so (`off`, or an outcome `none`).
        case noAnswer = "no-answer"
        /// Apple refused the answer, or it could not be decided (the reason is in ``ConsumptionRequestRecord/lastError``).
        case failed
        /// The 12 hours passed before an answer was sent.
        case late

        /// Whether nothing more happens to a request in this state.
        package var isFinal: Bool { ![.new, .pending, .manual].contains(self) }
    }

    /// The notification's UUID.
    package var notificationUUID: String
    package var receivedAt: Date
    package var state: State
    package var bundleId: String?
    package var environment: AppStoreEnvironment?
    package var transactionId: String?
    package var originalTransactionId: String?
    /// Who owns the purchase (nil when nobody did when it was decided).
    package var customerId: String?
    package var productId: String?
    package var productType: ProductType?
    package var reason: ConsumptionRequestReason?
    /// The notification's `signedDate`: Apple's 12 hours count from it.
    package var requestedAt: Date?
    package var deadline: Date?
    /// What decided it: `rule 2 (name)`, `otherwise`, `policy manual`, `not consented`, or the support key's name.
    package var decidedBy: String?
    /// What the decision was made from.
    package var facts: ConsumptionFacts?
    package var answer: ConsumptionAnswer?
    /// Calls to Send Consumption Information made.
    package var attempts: Int
    package var nextAttemptAt: Date?
    package var lastError: String?
    /// When it reached a final state.
    package var finishedAt: Date?

    package init(notificationUUID: String, receivedAt: Date, state: State = .new) {
        self.notificationUUID = notificationUUID
        self.receivedAt = receivedAt
        self.state = state
        self.attempts = 0
    }

    /// Apple's window: consumption information is sent within 12 hours of the request.
    package static let window: TimeInterval = 12 * 3_600

    package var customerKey: CustomerKey? {
        guard let bundleId, let environment else { return nil }
        return CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId ?? SupportAction.appWide)
    }

    /// `facts` and `answer` as the ledger stores them (JSON text), and read back.
    package static func text<T: Encodable>(_ value: T?) -> String? {
        value.flatMap { try? AppStoreJSON.makeEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) }
    }

    package static func value<T: Decodable>(_ text: String?, as type: T.Type) -> T? {
        text.flatMap { try? AppStoreJSON.makeDecoder().decode(T.self, from: Data($0.utf8)) }
    }
}

/// Whose requests a listing reads.
package enum ConsumptionRequestQuery: Sendable, Hashable {
    /// One customer's, newest first.
    case customer(CustomerKey)
    /// Those of `apps` in `states` (all when empty), the nearest deadline first.
    case apps([VerifierKey], states: [ConsumptionRequestRecord.State], limit: Int)
}

/// A customer's answer to "may we share your use of the app with Apple when you ask for a refund?", as the app
/// reported it.
package struct ConsumptionConsent: Sendable, Hashable, Codable {
    package var consented: Bool
    package var at: Date

    package init(consented: Bool, at: Date) {
        self.consented = consented
        self.at = at
    }
}

extension ConsumptionRequestRecord {
    /// The nearest deadline first (undecided requests, which have none yet, last), then the earliest received.
    package static func byDeadline(_ lhs: Self, _ rhs: Self) -> Bool {
        (lhs.deadline ?? .distantFuture, lhs.receivedAt, lhs.notificationUUID) < (
            rhs.deadline ?? .distantFuture, rhs.receivedAt, rhs.notificationUUID
        )
    }
}
