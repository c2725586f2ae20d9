package import AppStoreModels
package import AppStoreServerAPI
package import Foundation
import Synchronization

/// Extends one customer's subscription at the App Store (Extend a Subscription Renewal Date), after Storekeeper's own
/// checks of Apple's limits, and writes every attempt to the support audit log (``SupportAction``). The renewal date
/// itself moves when the App Store's `RENEWAL_EXTENDED` notification arrives, as every change does.
package struct SubscriptionExtender: Sendable {
    package var store: any LedgerStore
    /// The app's App Store Server API (`nil`: no credentials, nothing is attempted).
    package var client: AppStoreServerAPIClient?
    package var now: @Sendable () -> Date
    /// The longest the App Store is waited for (the request's answer must come within the server's response timeout).
    package var budget: Duration

    package init(store: any LedgerStore, client: AppStoreServerAPIClient?, now: @escaping @Sendable () -> Date, budget: Duration = .seconds(20)) {
        self.store = store
        self.client = client
        self.now = now
        self.budget = budget
    }

    /// Apple's limits: 1-90 days a request, at most twice in 365 days per subscription.
    package static let days = 1...90
    package static let extensionsPerYear = 2

    /// The subscriptions (environment and original transaction ID) being extended by this process now.
    static let inFlight = Mutex(Set<String>())

    package enum Outcome: Sendable {
        /// The App Store extended it; the audit record says to when.
        case extended(SupportAction)
        /// Refused by Storekeeper's checks or by the App Store; recorded, with why.
        case refused(SupportAction, reason: String)
        /// The App Store could not be reached or failed; recorded.
        case failed(SupportAction, reason: String)
        /// The customer has no such subscription in the app and environment: nothing attempted; recorded.
        case unknownSubscription(SupportAction)
        /// The app has no App Store Server API credentials: nothing attempted.
        case noCredentials
    }

    /// Extends `originalTransactionId`, a subscription of `customer`'s, by `days` for `reason`, on behalf of the API
    /// key named `keyName`; `note` is the support person's (kept in the audit record, at most 500 bytes).
    package func extend(
        _ originalTransactionId: String, of customer: CustomerKey, days: Int, reason: ExtendReasonCode, note: String?, keyName: String
    ) async throws(StorageError) -> Outcome {
        let ledger = try await store.ledger(for: customer.customerId, bundleId: customer.bundleId, environment: customer.environment)
        let key = LedgerKey(customer.environment, originalTransactionId)
        let theirs = ledger.transactions.values.filter {
            $0.info.originalTransactionId == originalTransactionId && $0.info.bundleId == customer.bundleId
                && $0.info.environment == customer.environment && ledger.customer(of: $0) == customer.customerId
        }
        var request: [String: JSONValue] = ["days": .integer(Int64(days)), "reason": .integer(Int64(reason.rawValue))]
        // The support person's text, escaped as all untrusted text is before it reaches a record.
        if let note { request["note"] = .string(UntrustedText.escaped(note, limit: 3_000)) }
        let at = now()
        func record(_ outcome: String, _ detail: [String: JSONValue]) async throws(StorageError) -> SupportAction {
            var action = SupportAction(
                at: at, keyName: keyName, customer: customer, action: SupportAction.Kind.extendRenewalDate.rawValue, target: originalTransactionId,
                request: request, outcome: outcome, detail: detail)
            action.id = try await store.recordSupportAction(action)
            return action
        }
        guard let latest = theirs.max(by: { $0.info.purchaseDate < $1.info.purchaseDate }), latest.info.type == .autoRenewable,
            ledger.subscriptions[key] != nil
        else {
            // Recorded too: asking for a subscription that is not the customer's leaves a trace.
            let reason = "not a subscription of this customer's in this app and environment"
            return .unknownSubscription(try await record("refused", ["reason": .string(reason), "code": .string("unknown-subscription")]))
        }
        guard let client else { return .noCredentials }
        // One extension of a subscription at a time on this server: two at once would both pass the limit below.
        let flight = "\(customer.environment.rawValue) \(originalTransactionId)"
        guard Self.inFlight.withLock({ $0.insert(flight).inserted }) else {
            let reason = "another extension of this subscription is on its way: try again when it has answered"
            return .refused(try await record("refused", ["reason": .string(reason), "code": .string("in-progress")]), reason: reason)
        }
        defer { _ = Self.inFlight.withLock { $0.remove(flight) } }
        // Storekeeper's checks first: what Apple would refuse is refused here, without spending a call.
        if latest.info.inAppOwnershipType == .familyShared {
            let reason = "a family member's shared copy cannot be extended directly: extend the purchaser's subscription"
            return .refused(try await record("refused", ["reason": .string(reason), "code": .string("family-shared")]), reason: reason)
        }
        let yearAgo = at.addingTimeInterval(-365 * 86_400)
        let recent = try await store.supportActions(target: originalTransactionId, environment: customer.environment).filter {
            // Done, or unknown (Apple did not answer in time, and may have extended it): both count.
            $0.action == SupportAction.Kind.extendRenewalDate.rawValue && $0.at > yearAgo
                && ($0.outcome == "done" || $0.detail["code"] == .string("timeout"))
        }
        if recent.count >= Self.extensionsPerYear {
            let reason = "extended \(recent.count) times in the past 365 days already: Apple allows \(Self.extensionsPerYear)"
            return .refused(try await record("refused", ["reason": .string(reason), "code": .string("extension-limit")]), reason: reason)
        }
        let identifier = UUID().uuidString.lowercased()
        let asked = ExtendRenewalDateRequest(extendByDays: days, extendReasonCode: reason, requestIdentifier: identifier)
        var detail: [String: JSONValue] = ["requestIdentifier": .string(identifier)]
        let answer: ExtendRenewalDateResponse
        let called = await withinBudget(budget) { () -> Swift.Result<ExtendRenewalDateResponse, AppStoreServerAPIError> in
            do throws(AppStoreServerAPIError) {
                return .success(try await client.extendRenewalDate(originalTransactionId, asked))
            } catch {
                return .failure(error)
            }
        }
        guard let called else {
            let reason =
                "the App Store did not answer within \(budget.components.seconds) s: the extension may have been made; "
                + "look for RENEWAL_EXTENDED in the customer's timeline before trying again"
            detail["reason"] = .string(reason)
            detail["code"] = .string("timeout")
            return .failed(try await record("failed", detail), reason: reason)
        }
        do throws(AppStoreServerAPIError) {
            answer = try called.get()
        } catch {
            if let status = Self.refusalStatus(error) {
                // Apple refused: its code, name and meaning (a code this version does not know, by number).
                if let code = error.errorCode { detail["appleErrorCode"] = .integer(Int64(code)) }
                if let named = error.errorCode.flatMap(APIErrorCode.named) { detail["appleError"] = .string(named.name) }
                let reason = Self.refusal(error, status: status)
                detail["reason"] = .string(reason)
                return .refused(try await record("refused", detail), reason: reason)
            }
            let reason = "the App Store could not be reached or failed: \(UntrustedText.escaped(error.detail, limit: 300))"
            detail["reason"] = .string(reason)
            return .failed(try await record("failed", detail), reason: reason)
        }
        detail["success"] = .bool(answer.success ?? false)
        if let effective = answer.effectiveDate { detail["effectiveDate"] = .integer(effective.epochMilliseconds) }
        if let line = answer.webOrderLineItemId { detail["webOrderLineItemId"] = .string(line) }
        guard answer.success == true else {
            let reason = "the App Store answered without success"
            detail["reason"] = .string(reason)
            return .refused(try await record("refused", detail), reason: reason)
        }
        return .extended(try await record("done", detail))
    }

    /// The HTTP status of an answer that is the App Store refusing the request (a 4xx but 401, our credentials, and
    /// 429, its rate limit), or `nil` when the App Store could not be reached or failed.
    package static func refusalStatus(_ error: AppStoreServerAPIError) -> Int? {
        guard let status = error.httpStatus, (400..<500).contains(status), status != 401, status != 429 else { return nil }
        return status
    }

    /// What the App Store's refusal says: its error's name, code and meaning, or its status and code when this
    /// version does not know the code.
    package static func refusal(_ error: AppStoreServerAPIError, status: Int) -> String {
        if let named = error.errorCode.flatMap(APIErrorCode.named) { return "the App Store refused: \(named.name) (\(named.code)): \(named.message)" }
        return "the App Store refused: HTTP \(status)\(error.errorCode.map { ", error \($0)" } ?? "")"
    }
}

/// `body`'s result, or `nil` when `budget` passes first (`body` is then cancelled).
package func withinBudget<T: Sendable>(_ budget: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: budget)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}
