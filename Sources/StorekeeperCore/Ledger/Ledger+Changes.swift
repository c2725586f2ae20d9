package import AppStoreModels

extension Ledger {
    /// The customers whose view of the ledger can differ between `before` and this ledger: for every subscription
    /// or purchase that changed (a transaction, a subscription record or an explicit link), the customer it is
    /// linked to and the owners of its app account tokens, before and after; and both owners of a token that
    /// changed hands.
    ///
    /// Read caches drop exactly these customers after a write commits, so the token owners of the families a write
    /// touches must be loaded into both ledgers (``tokenOwners``) for the answer to be complete.
    package func customersAffected(since before: Ledger) -> Set<String> {
        var families = Set<LedgerKey>()
        for key in Set(transactions.keys).union(before.transactions.keys) where transactions[key] != before.transactions[key] {
            for transaction in [transactions[key], before.transactions[key]].compactMap({ $0 }) {
                if let environment = transaction.info.environment {
                    families.insert(LedgerKey(environment, transaction.info.originalTransactionId))
                }
            }
        }
        for key in Set(subscriptions.keys).union(before.subscriptions.keys) where subscriptions[key] != before.subscriptions[key] {
            families.insert(key)
        }
        for key in Set(explicitLinks.keys).union(before.explicitLinks.keys) where explicitLinks[key] != before.explicitLinks[key] {
            families.insert(key)
        }
        var customers = Set<String>()
        for token in Set(tokenOwners.keys).union(before.tokenOwners.keys) where tokenOwners[token] != before.tokenOwners[token] {
            customers.formUnion([tokenOwners[token], before.tokenOwners[token]].compactMap { $0 })
        }
        for ledger in [self, before] {
            var tokens = Set<AppAccountTokenKey>()
            for family in families {
                if let customer = ledger.explicitLinks[family] { customers.insert(customer) }
                if let subscription = ledger.subscriptions[family], let token = subscription.renewalInfo?.appAccountToken {
                    tokens.insert(AppAccountTokenKey(bundleId: subscription.bundleId, environment: family.environment, token: token))
                }
            }
            for transaction in ledger.transactions.values {
                guard let key = transaction.tokenKey,
                    families.contains(LedgerKey(key.environment, transaction.info.originalTransactionId))
                else { continue }
                tokens.insert(key)
            }
            for token in tokens {
                customers.formUnion([tokenOwners[token], before.tokenOwners[token]].compactMap { $0 })
            }
        }
        return customers
    }

    /// Every app account token the ledger's transactions and renewal infos carry, in their app and environment
    /// (whose owners a write must load).
    package var appAccountTokens: Set<AppAccountTokenKey> {
        var tokens = Set(transactions.values.compactMap(\.tokenKey))
        for (key, subscription) in subscriptions {
            if let token = subscription.renewalInfo?.appAccountToken {
                tokens.insert(AppAccountTokenKey(bundleId: subscription.bundleId, environment: key.environment, token: token))
            }
        }
        return tokens
    }
}

extension LedgerTransaction {
    /// Its app account token in its app and environment, if it carries one.
    package var tokenKey: AppAccountTokenKey? { Self.tokenKey(of: info) }

    /// A transaction's app account token in its app and environment, if it carries one.
    package static func tokenKey(of info: TransactionInfo) -> AppAccountTokenKey? {
        guard let token = info.appAccountToken, let environment = info.environment else { return nil }
        return AppAccountTokenKey(bundleId: info.bundleId, environment: environment, token: token)
    }
}
