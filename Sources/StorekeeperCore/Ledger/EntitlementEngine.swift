package import AppStoreModels
package import Foundation

/// Computes what a customer is entitled to at a moment, from the ledger alone.
package struct EntitlementEngine: Sendable {
    package var configuration: EntitlementConfiguration

    package init(configuration: EntitlementConfiguration) {
        self.configuration = configuration
    }

    /// StoreKit 2's `currentEntitlements`: auto-renewables active or in Billing Grace Period (billing retry if
    /// configured) with the highest level per group, purchased or family-shared; non-consumables not revoked;
    /// non-renewing subscriptions within their configured duration. Consumables count as balances.
    package func state(of customerId: String, in ledger: Ledger, environment: AppStoreEnvironment, at now: Date) -> CustomerState {
        state(
            of: customerId, transactions: ledger.transactions(of: customerId, environment: environment), in: ledger, environment: environment, at: now
        )
    }

    /// The state and, from the same look-up of the customer's transactions, the next change after `now`.
    package func evaluate(
        _ customerId: String, in ledger: Ledger, environment: AppStoreEnvironment, at now: Date
    ) -> (state: CustomerState, nextChange: Date?) {
        evaluate(customerId, owning: ledger.transactions(of: customerId, environment: environment), in: ledger, environment: environment, at: now)
    }

    /// ``evaluate(_:in:environment:at:)`` with the customer's transactions in the environment already found
    /// (``Ledger/transactions(of:environment:)``).
    package func evaluate(
        _ customerId: String, owning transactions: [LedgerTransaction], in ledger: Ledger, environment: AppStoreEnvironment, at now: Date
    ) -> (state: CustomerState, nextChange: Date?) {
        let evaluated = evaluate(
            customerId, owning: transactions, latest: Self.latestPerSubscription(transactions), in: ledger, environment: environment, at: now)
        return (evaluated.state, evaluated.nextChange)
    }

    /// ``evaluate(_:owning:in:environment:at:)`` with the latest transaction of each of the customer's subscriptions
    /// found too (``latestPerSubscription(_:)``): an answer lists them.
    func evaluate(
        _ customerId: String, owning transactions: [LedgerTransaction], latest: [String: LedgerTransaction], in ledger: Ledger,
        environment: AppStoreEnvironment, at now: Date
    ) -> (state: CustomerState, nextChange: Date?) {
        (
            state(of: customerId, transactions: transactions, latest: latest, in: ledger, environment: environment, at: now),
            nextChange(of: customerId, transactions: transactions, latest: latest, in: ledger, environment: environment, after: now)
        )
    }

    private func state(
        of customerId: String, transactions: [LedgerTransaction], in ledger: Ledger, environment: AppStoreEnvironment, at now: Date
    ) -> CustomerState {
        state(
            of: customerId, transactions: transactions, latest: Self.latestPerSubscription(transactions), in: ledger, environment: environment,
            at: now)
    }

    private func state(
        of customerId: String, transactions: [LedgerTransaction], latest latestOfEach: [String: LedgerTransaction], in ledger: Ledger,
        environment: AppStoreEnvironment, at now: Date
    ) -> CustomerState {
        var products: [(level: Int, group: String?, entitlement: Entitlement)] = []
        var balance: [String: Int] = [:]

        // Auto-renewables: the latest transaction of each subscription decides.
        for (original, latest) in latestOfEach {
            guard latest.info.revocationDate == nil else { continue }
            let subscription = ledger.subscriptions[LedgerKey(environment, original)]
            let renewal = subscription?.renewalInfo
            let active = (latest.info.expiresDate ?? .distantPast) > now
            let inGrace =
                !active && (renewal?.gracePeriodExpiresDate ?? .distantPast) > now
                && (renewal?.isInBillingRetryPeriod ?? false) && subscription?.status != .expired
            let inRetry =
                !active && !inGrace && (renewal?.isInBillingRetryPeriod ?? false)
                && subscription?.status == .billingRetry
            guard active || inGrace || (inRetry && configuration.billingRetryGrantsAccess) else { continue }
            products.append(
                (
                    configuration.subscriptionLevels[latest.info.productId] ?? Int.max,
                    latest.info.subscriptionGroupIdentifier,
                    entitlement(
                        for: latest, expires: latest.info.expiresDate, willRenew: renewal.map { $0.autoRenewStatus == .on },
                        grace: inGrace, retry: inRetry)
                ))
        }
        for transaction in transactions where transaction.info.revocationDate == nil {
            let info = transaction.info
            switch info.type {
            case .nonConsumable:
                products.append((0, nil, entitlement(for: transaction, expires: nil, willRenew: nil, grace: false, retry: false)))
            case .nonRenewing:
                guard let duration = configuration.nonRenewingDurations[info.productId] else { continue }
                let end = info.purchaseDate.addingTimeInterval(duration)
                if end > now {
                    products.append((0, nil, entitlement(for: transaction, expires: end, willRenew: nil, grace: false, retry: false)))
                }
            case .consumable:
                balance[info.productId, default: 0] += info.quantity ?? 1
            default:
                break
            }
        }
        // Consumables a partial ledger counted instead of holding.
        for (key, total) in ledger.consumableTotals where key.customerId == customerId && key.environment == environment && total.units > 0 {
            balance[key.productId, default: 0] += total.units
        }
        // The highest level per subscription group; purchased before family-shared at the same level.
        var best: [String: (level: Int, entitlement: Entitlement)] = [:]
        var others: [Entitlement] = []
        for (level, group, entitlement) in products {
            guard let group else {
                if !others.contains(where: { $0.productId == entitlement.productId }) { others.append(entitlement) }
                continue
            }
            if let current = best[group],
                current.level < level
                    || (current.level == level
                        && (current.entitlement.ownership == .purchased || current.entitlement.transactionId > entitlement.transactionId))
            {
                continue
            }
            best[group] = (level, entitlement)
        }
        let chosen = (best.values.map(\.entitlement) + others)
        var entitlements: [Entitlement] = []
        for product in chosen {
            for name in configuration.productEntitlements[product.productId] ?? [product.productId] {
                var copy = product
                copy.entitlement = name
                entitlements.append(copy)
            }
        }
        // Promotional grants: beside purchases, never instead of them (each names its grant).
        for grant in ledger.grants.values where grant.customerId == customerId && grant.environment == environment && grant.isActive(at: now) {
            entitlements.append(Entitlement(grant: grant))
        }
        entitlements.sort { ($0.entitlement, $0.productId, $0.grantId ?? "") < ($1.entitlement, $1.productId, $1.grantId ?? "") }
        return CustomerState(
            customerId: customerId, environment: environment, entitlements: entitlements,
            entitledProductIds: Set(chosen.map(\.productId)).sorted(), consumableBalance: balance
        )
    }

    /// The latest transaction (by purchase date, then ID) of each auto-renewable subscription, by original ID: the
    /// one that decides the subscription's state.
    package static func latestPerSubscription(_ transactions: [LedgerTransaction]) -> [String: LedgerTransaction] {
        // One pass, each transaction copied only when it is the latest so far (a transaction is a large value).
        var latest: [String: LedgerTransaction] = [:]
        for transaction in transactions where transaction.info.type == .autoRenewable {
            if let current = latest[transaction.info.originalTransactionId], !transaction.isLater(than: current) { continue }
            latest[transaction.info.originalTransactionId] = transaction
        }
        return latest
    }

    private func entitlement(
        for transaction: LedgerTransaction,
        expires: Date?,
        willRenew: Bool?,
        grace: Bool,
        retry: Bool
    ) -> Entitlement {
        Entitlement(
            entitlement: transaction.info.productId, productId: transaction.info.productId, productType: transaction.info.type,
            ownership: transaction.info.inAppOwnershipType ?? .purchased, expiresDate: expires, willRenew: willRenew,
            inGracePeriod: grace, inBillingRetry: retry, transactionId: transaction.info.transactionId,
            originalTransactionId: transaction.info.originalTransactionId, source: transaction.source
        )
    }
}

extension EntitlementEngine {
    /// The first moment after `now` at which the passage of time alone can change the customer's state (an
    /// expiry, the end of a grace period or of a non-renewing subscription), or `nil` if none is ahead. Until then
    /// ``state(of:in:environment:at:)`` gives the same answer for the same ledger, so it can be cached.
    package func nextChange(of customerId: String, in ledger: Ledger, environment: AppStoreEnvironment, after now: Date) -> Date? {
        let transactions = ledger.transactions(of: customerId, environment: environment)
        return nextChange(
            of: customerId, transactions: transactions, latest: Self.latestPerSubscription(transactions), in: ledger, environment: environment,
            after: now)
    }

    private func nextChange(
        of customerId: String, transactions: [LedgerTransaction], latest: [String: LedgerTransaction], in ledger: Ledger,
        environment: AppStoreEnvironment, after now: Date
    ) -> Date? {
        var next: Date? = nil
        func consider(_ date: Date?) {
            guard let date, date > now else { return }
            next = min(next ?? date, date)
        }
        // As in `state`: an auto-renewable subscription is decided by its latest transaction alone.
        for latest in latest.values {
            consider(latest.info.expiresDate)
            consider(ledger.subscriptions[LedgerKey(environment, latest.info.originalTransactionId)]?.renewalInfo?.gracePeriodExpiresDate)
        }
        for transaction in transactions where transaction.info.type == .nonRenewing {
            if let duration = configuration.nonRenewingDurations[transaction.info.productId] {
                consider(transaction.info.purchaseDate.addingTimeInterval(duration))
            }
        }
        for grant in ledger.grants.values where grant.customerId == customerId && grant.environment == environment && grant.isActive(at: now) {
            consider(grant.expiresDate)
        }
        return next
    }
}
