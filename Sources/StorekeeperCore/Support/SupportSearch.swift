package import AppStoreModels
package import AppStoreServerAPI
package import AppStoreSigning
import Foundation

/// One ID a support person searches by, as a customer or Apple's emails give it.
package enum SupportLookup: Sendable, Hashable {
    case transactionId(String)
    case originalTransactionId(String)
    case appAccountToken(LowercaseUUID)
}

/// Who a support search finds: a customer of one app in one environment, and what matched.
package struct SupportMatch: Sendable, Hashable, Codable, Comparable {
    package var customerId: String
    package var bundleId: String
    package var environment: AppStoreEnvironment
    /// `customerId`, `transactionId`, `originalTransactionId`, `appAccountToken` or `orderId`.
    package var matchedBy: String
    /// The purchase that matched (absent for a customer ID or a token no purchase carries yet).
    package var originalTransactionId: String?

    package init(
        customerId: String, bundleId: String, environment: AppStoreEnvironment, matchedBy: String, originalTransactionId: String? = nil
    ) {
        self.customerId = customerId
        self.bundleId = bundleId
        self.environment = environment
        self.matchedBy = matchedBy
        self.originalTransactionId = originalTransactionId
    }

    package static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.bundleId, lhs.environment.rawValue, lhs.customerId, lhs.matchedBy, lhs.originalTransactionId ?? "")
            < (rhs.bundleId, rhs.environment.rawValue, rhs.customerId, rhs.matchedBy, rhs.originalTransactionId ?? "")
    }
}

/// Finds customers by any ID support is given: a customer ID, a transaction ID, an original transaction ID, an app
/// account token, or the order ID of Apple's emailed receipt (looked up at Apple, verified, then found by its
/// transactions). Only the apps in `apps` (a support key's) are searched; a purchase nobody owns (a notification
/// about a customer the server has not met yet) is no match, since there is no customer to show.
package struct SupportSearch: Sendable {
    package var store: any LedgerStore
    /// The apps and environments searched: the key's app's, or every configured one.
    package var apps: [VerifierKey]
    /// The App Store Server API of the searched production apps that have credentials, for order IDs (Look Up Order ID
    /// exists in production only).
    package var orderLookups: [VerifierKey: AppStoreAccess]

    /// What a search found, and the order look-ups that failed (the rest of the search still answers).
    package struct Result: Sendable {
        package var matches: [SupportMatch]
        /// Per app whose Look Up Order ID failed: why (the App Store's error, escaped).
        package var lookupFailures: [String]
    }

    package init(store: any LedgerStore, apps: [VerifierKey], orderLookups: [VerifierKey: AppStoreAccess] = [:]) {
        self.store = store
        self.apps = apps
        // Look Up Order ID has no sandbox URL: orders are production purchases.
        self.orderLookups = orderLookups.filter { apps.contains($0.key) && $0.key.environment == .production }
    }

    /// Whether `text` is shaped like an order ID as Apple's emailed receipts print them: upper-case letters and digits
    /// (1-64, what Look Up Order ID takes), at least one letter (all digits is a transaction ID). Your own customer
    /// IDs, in lower case, are never sent to Apple.
    static func mayBeOrderId(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64
            && text.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            && text.utf8.contains { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }
    }

    /// ``search(_:)``; and, when nothing matched in the ledger and `text` is shaped like an order ID, Look Up Order ID
    /// at each searched production app with credentials, all at once, each given at most `budget` (a look-up still
    /// running then is reported as a failure: the search answers within the server's response timeout).
    package func searchWithOrders(_ text: String, budget: Duration = .seconds(20)) async throws(StorageError) -> Result {
        let local = try await search(text)
        guard local.isEmpty, Self.mayBeOrderId(text), !orderLookups.isEmpty else { return Result(matches: local, lookupFailures: []) }
        let answers = await withTaskGroup(of: (VerifierKey, Swift.Result<[VerifiedSignedData<TransactionInfo>], AppStoreServerAPIError>?).self) {
            group in
            for (app, lookup) in orderLookups {
                group.addTask {
                    do throws(AppStoreServerAPIError) {
                        return (app, .success(try await lookup.client.orderTransactions(text, verifier: lookup.verifier)))
                    } catch {
                        return (app, .failure(error))
                    }
                }
            }
            var answers: [(VerifierKey, Swift.Result<[VerifiedSignedData<TransactionInfo>], AppStoreServerAPIError>?)] = []
            let deadline = ContinuousClock.now.advanced(by: budget)
            group.addTask {
                try? await Task.sleep(until: deadline)
                return (VerifierKey(bundleId: "", environment: .production), nil)
            }
            for await answer in group {
                if answer.1 == nil { break }
                answers.append(answer)
                if answers.count == orderLookups.count { break }
            }
            group.cancelAll()
            return answers
        }
        var matches = Set<SupportMatch>()
        var failures: [String] = []
        for app in orderLookups.keys.sorted(by: { $0.description < $1.description }) {
            guard let answer = answers.first(where: { $0.0 == app })?.1 else {
                failures.append("\(app): Look Up Order ID did not answer within \(budget.components.seconds) s")
                continue
            }
            switch answer {
            case .failure(let error):
                failures.append("\(app): Look Up Order ID failed: \(UntrustedText.escaped(error.detail, limit: 300))")
            case .success(let transactions):
                for transaction in transactions {
                    for found in try await self.matches(.transactionId(transaction.payload.transactionId)) {
                        var match = found
                        match.matchedBy = "orderId"
                        matches.insert(match)
                    }
                }
            }
        }
        return Result(matches: matches.sorted(), lookupFailures: failures)
    }

    /// Every match of `text`: as a customer ID in each app; as a transaction or original transaction ID when it is
    /// digits (Apple's IDs are); as an app account token when it is a UUID. Sorted, without duplicates.
    package func search(_ text: String) async throws(StorageError) -> [SupportMatch] {
        var matches = Set<SupportMatch>()
        for app in apps where try await store.customerExists(text, bundleId: app.bundleId, environment: app.environment) {
            matches.insert(SupportMatch(customerId: text, bundleId: app.bundleId, environment: app.environment, matchedBy: "customerId"))
        }
        var lookups: [SupportLookup] = []
        if !text.isEmpty, text.utf8.count <= 64, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            lookups += [.transactionId(text), .originalTransactionId(text)]
        }
        if let token = LowercaseUUID(uuidString: text) { lookups.append(.appAccountToken(token)) }
        for lookup in lookups { matches.formUnion(try await self.matches(lookup)) }
        return matches.sorted()
    }

    /// The customers one lookup finds in the searched apps.
    func matches(_ lookup: SupportLookup) async throws(StorageError) -> [SupportMatch] {
        let ledger = try await store.supportLookup(lookup, in: apps)
        var found: [SupportMatch] = []
        func searched(_ bundleId: String, _ environment: AppStoreEnvironment) -> Bool {
            apps.contains { $0.bundleId == bundleId && $0.environment == environment }
        }
        for transaction in ledger.transactions.values {
            let info = transaction.info
            guard let environment = info.environment, searched(info.bundleId, environment) else { continue }
            let matchedBy: String
            switch lookup {
            case .transactionId(let id):
                guard info.transactionId == id else { continue }
                matchedBy = "transactionId"
            case .originalTransactionId(let id):
                guard info.originalTransactionId == id else { continue }
                matchedBy = "originalTransactionId"
            case .appAccountToken(let token):
                guard info.appAccountToken == token else { continue }
                matchedBy = "appAccountToken"
            }
            guard let customer = ledger.customer(of: transaction) else { continue }
            found.append(
                SupportMatch(
                    customerId: customer, bundleId: info.bundleId, environment: environment, matchedBy: matchedBy,
                    originalTransactionId: info.originalTransactionId))
        }
        if case .appAccountToken(let token) = lookup {
            // A token the server issued, with no purchase yet: its owner is the match (once: not again beside their
            // purchases that carry it).
            for (key, owner) in ledger.tokenOwners where key.token == token && searched(key.bundleId, key.environment) {
                guard !found.contains(where: { $0.customerId == owner && $0.bundleId == key.bundleId && $0.environment == key.environment })
                else { continue }
                found.append(SupportMatch(customerId: owner, bundleId: key.bundleId, environment: key.environment, matchedBy: "appAccountToken"))
            }
        }
        return found
    }
}

/// One app's App Store Server API and the verifier of what it answers.
package struct AppStoreAccess: Sendable {
    package var client: AppStoreServerAPIClient
    package var verifier: SignedDataVerifier

    package init(client: AppStoreServerAPIClient, verifier: SignedDataVerifier) {
        self.client = client
        self.verifier = verifier
    }
}

extension Ledger {
    /// The app account tokens whose owners say whose its purchases are (those its transactions and renewal infos
    /// carry), and the token `lookup` searches for in each of `apps`: what a store's ``LedgerStore/supportLookup(_:in:)``
    /// reads the owners of.
    package func tokensNamingOwners(searched lookup: SupportLookup, in apps: [VerifierKey]) -> Set<AppAccountTokenKey> {
        var tokens = Set<AppAccountTokenKey>()
        for transaction in transactions.values {
            guard let token = transaction.info.appAccountToken, let environment = transaction.info.environment else { continue }
            tokens.insert(AppAccountTokenKey(bundleId: transaction.info.bundleId, environment: environment, token: token))
        }
        for (key, subscription) in subscriptions {
            guard let token = subscription.renewalInfo?.appAccountToken else { continue }
            tokens.insert(AppAccountTokenKey(bundleId: subscription.bundleId, environment: key.environment, token: token))
        }
        if case .appAccountToken(let token) = lookup {
            for app in apps { tokens.insert(AppAccountTokenKey(bundleId: app.bundleId, environment: app.environment, token: token)) }
        }
        return tokens
    }
}
