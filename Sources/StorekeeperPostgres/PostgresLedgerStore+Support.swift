import AppStoreModels
import PostgresNIO
package import StorekeeperCore

extension PostgresLedgerStore {
    package func supportLookup(_ lookup: SupportLookup, in apps: [VerifierKey]) async throws(StorageError) -> Ledger {
        let environments = Set(apps.map(\.environment.rawValue)).sorted()
        return try await read { connection in
            let rows: PostgresRowSequence
            switch lookup {
            case .transactionId(let id):
                rows = try await connection.run(
                    """
                    SELECT environment, original_transaction_id FROM transactions
                    WHERE environment = ANY(\(environments)) AND transaction_id = \(id)
                    """)
            case .originalTransactionId(let id):
                rows = try await connection.run(
                    """
                    SELECT DISTINCT environment, original_transaction_id FROM transactions
                    WHERE environment = ANY(\(environments)) AND original_transaction_id = \(id)
                    """)
            case .appAccountToken(let token):
                rows = try await connection.run(
                    """
                    SELECT DISTINCT environment, original_transaction_id FROM transactions
                    WHERE app_account_token = \(token.description) AND environment = ANY(\(environments))
                    """)
            }
            var families: [LedgerKey] = []
            for try await (environment, original) in rows.decode((String, String).self) {
                families.append(LedgerKey(AppStoreEnvironment(rawValue: environment), original))
            }
            var ledger = Ledger()
            try await self.loadFamilies(connection, nil, families.sorted(), into: &ledger)
            // The owners of the tokens that may name the purchases' customers, and of the token searched for.
            var tokens = Set<AppAccountTokenKey>()
            for transaction in ledger.transactions.values {
                guard let token = transaction.info.appAccountToken, let environment = transaction.info.environment else { continue }
                tokens.insert(AppAccountTokenKey(bundleId: transaction.info.bundleId, environment: environment, token: token))
            }
            for (key, subscription) in ledger.subscriptions {
                guard let token = subscription.renewalInfo?.appAccountToken else { continue }
                tokens.insert(AppAccountTokenKey(bundleId: subscription.bundleId, environment: key.environment, token: token))
            }
            if case .appAccountToken(let token) = lookup {
                for app in apps { tokens.insert(AppAccountTokenKey(bundleId: app.bundleId, environment: app.environment, token: token)) }
            }
            try await self.loadFamilies(connection, nil, [], tokens: tokens, into: &ledger)
            return ledger
        }
    }
}
