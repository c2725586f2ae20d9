package import AppStoreModels
package import AppStoreReceipts
import AppStoreServerAPI
package import Foundation
import Hummingbird
import HummingbirdAuth
package import StorekeeperCore
package import StorekeeperHTTP

/// `POST /v1/customers/{id}/receipts` with `{"receipt": "<base64 app receipt>"}`: what an app build of the StoreKit 1
/// era sends. The receipt is verified (its signature and chain, `ReceiptVerifier`, against the app's trusted roots:
/// `"apple"` is the 2006 Apple Root CA for receipts), one transaction ID taken from it, and the customer's account
/// imported from the App Store (`AccountImporter`: statuses and history, verified, applied and linked under the
/// ownership rules and the restore policy). The answer: what was linked or refused, and the customer's entitlements.
/// Idempotent: sending the same receipt again links nothing new.
package struct ReceiptMigrationAPI: Sendable {
    let configuration: ServerConfiguration
    let receiptVerifiers: [String: ReceiptVerifier]
    let importers: [VerifierKey: AccountImporter]
    let reader: CustomerReader<ByteBuffer>
    let now: @Sendable () -> Date

    struct Body: Decodable { var receipt: String }

    /// How long a migration waits for the App Store (below the HTTP response timeout's default, 60 s).
    static let appStoreTimeout: Duration = .seconds(25)

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.post("/customers/:customerId/receipts") { request, context in
            try await migrate(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
    }

    /// The environment a receipt's type (field 0) names; `nil` for Xcode's.
    static func environment(of receipt: AppReceipt) throws(APIError) -> AppStoreEnvironment? {
        switch receipt.receiptType {
        case "Production": return .production
        case "ProductionSandbox", "Sandbox": return .sandbox
        case "Xcode": return nil
        default:
            throw APIError(
                .badRequest, .invalidReceipt,
                "the receipt's type (field 0) is \(receipt.receiptType.map { UntrustedText.quoted($0, limit: 64) } ?? "missing"): it must be Production or ProductionSandbox"
            )
        }
    }

    /// What a verified receipt names: its app and environment, the transaction ID to import its account with.
    package struct ReceiptAccount: Sendable {
        package var bundleId: String
        package var environment: AppStoreEnvironment
        package var transactionId: String
        package var verified: ReceiptVerifier.Verified
    }

    /// Parses `text` (a base64 receipt) to learn its app, verifies it with that app's roots, and says which account
    /// to import; the error names what is wrong. `keyApp`: the only app the caller may act for; `asked`: the app the
    /// request names.
    package static func account(
        ofReceipt text: String, verifiers receiptVerifiers: [String: ReceiptVerifier], apps: [ServerConfiguration.App], keyApp: String?,
        asked: String?, now: Date
    ) throws(APIError) -> ReceiptAccount {
        // Parsed first to learn its app; then verified with that app's roots.
        let parsed: ParsedReceipt
        do {
            parsed = try ReceiptParser.parse(Array(text.utf8))
        } catch {
            throw APIError(.badRequest, .invalidReceipt, "\(error.code.rawValue): \(UntrustedText.escaped(error.message, limit: 400))")
        }
        let bundleId = parsed.receipt.bundleId
        if let own = keyApp, own != bundleId {
            throw APIError(
                .forbidden, .otherApp,
                "the receipt is app \(UntrustedText.quoted(bundleId, limit: 128))'s; this key acts for \(UntrustedText.quoted(own, limit: 128)) only")
        }
        if let asked = asked, asked != bundleId {
            throw APIError(
                .badRequest, .invalidReceipt,
                "the receipt is app \(UntrustedText.quoted(bundleId, limit: 128))'s, not \(UntrustedText.quoted(asked, limit: 128))'s")
        }
        guard let app = apps.first(where: { $0.bundleId == bundleId }), let verifier = receiptVerifiers[bundleId] else {
            throw APIError(
                .badRequest, .unknownApp, "the receipt's app \(UntrustedText.quoted(bundleId, limit: 128)) is not configured on this server")
        }
        let verified: ReceiptVerifier.Verified
        do {
            verified = try verifier.verify(Array(text.utf8), at: .creation, now: now)
        } catch {
            throw APIError(.badRequest, .invalidReceipt, "\(error.code.rawValue): \(UntrustedText.escaped(error.message, limit: 400))")
        }
        guard let environment = try Self.environment(of: verified.receipt) else {
            throw APIError(
                .unprocessableContent, .noPurchases,
                "an Xcode receipt names StoreKit Testing transactions, which the App Store Server API does not know: submit them as signed transactions instead"
            )
        }
        guard app.environments.contains(environment) else {
            throw APIError(.badRequest, .unknownEnvironment, "app '\(bundleId)' does not accept environment \(environment.rawValue) (the receipt's)")
        }
        guard let transactionId = verified.receipt.transactionIdForHistory else {
            throw APIError(.unprocessableContent, .noPurchases, "the receipt holds no in-app purchase: there is nothing to migrate")
        }
        return ReceiptAccount(bundleId: bundleId, environment: environment, transactionId: transactionId, verified: verified)
    }

    /// A line's importer and transaction ID: the default app's for a transaction ID, the receipt's (verified) for a
    /// receipt; or its failed result.
    package static func resolve(
        _ line: CustomerImport.Line, importers: [VerifierKey: AccountImporter], defaultApp: VerifierKey?,
        receiptVerifiers: [String: ReceiptVerifier], apps: [ServerConfiguration.App], bundleId: String?
    ) -> Result<(AccountImporter, String), CustomerImport.LineResult> {
        switch line.source {
        case .transactionId(let id):
            guard let defaultApp, let importer = importers[defaultApp] else {
                return .failure(
                    .init(
                        line: line.number, customerId: line.customerId, outcome: .failed, code: "no-credentials",
                        message: "no app for transaction IDs"))
            }
            return .success((importer, id))
        case .receipt(let text):
            do {
                let account = try ReceiptMigrationAPI.account(
                    ofReceipt: text, verifiers: receiptVerifiers, apps: apps, keyApp: nil, asked: bundleId, now: Date())
                guard let importer = importers[VerifierKey(bundleId: account.bundleId, environment: account.environment)] else {
                    return .failure(
                        .init(
                            line: line.number, customerId: line.customerId, outcome: .failed, code: "no-credentials",
                            message: "app '\(account.bundleId)' has no serverAPI credentials for \(account.environment.rawValue)"))
                }
                return .success((importer, account.transactionId))
            } catch {
                return .failure(
                    .init(line: line.number, customerId: line.customerId, outcome: .failed, code: error.code.rawValue, message: error.message))
            }
        }
    }

    func migrate(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId"])
        try CustomerAPI.refuseOtherApp(identity, asked: query.string("bundleId"))
        let buffer = try await StorekeeperApplication.readBody(request)
        let text: String
        do {
            text = try StrictJSONDecoder.decode(Body.self, from: Array(buffer.readableBytesView), file: "the body").receipt
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                #"the body must be JSON {"receipt": "<base64 app receipt>"}: "#
                    + UntrustedText.escaped(error.message, limit: StrictJSONDecoder.answerLimit))
        }
        let account = try Self.account(
            ofReceipt: text, verifiers: receiptVerifiers, apps: configuration.apps, keyApp: identity.bundleId, asked: query.string("bundleId"),
            now: now())
        let (bundleId, environment, transactionId, verified) = (account.bundleId, account.environment, account.transactionId, account.verified)
        let key = VerifierKey(bundleId: bundleId, environment: environment)
        guard let importer = importers[key] else {
            throw APIError(
                .serviceUnavailable, .noCredentials,
                "migrating a receipt asks the App Store for its history, and app '\(bundleId)' has no App Store Server API credentials for \(environment.rawValue) (serverAPI in the configuration)"
            )
        }
        // Within the App Store's own bound, well inside the HTTP response timeout: an App Store that does not answer is
        // a 502 the app can retry, never a connection dropped unanswered.
        let outcome = await withTaskGroup(of: Result<AccountImporter.Report, AccountImporter.Failure>?.self) { group in
            group.addTask {
                do throws(AccountImporter.Failure) {
                    return .success(try await importer.importCustomer(customerId, transactionId: transactionId))
                } catch {
                    return .failure(error)
                }
            }
            group.addTask {
                try? await Task.sleep(for: Self.appStoreTimeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        let report: AccountImporter.Report
        switch outcome {
        case .none:
            throw APIError(
                .badGateway, .appStoreUnavailable,
                "the App Store did not answer the history of the receipt's transaction within \(Self.appStoreTimeout): what was applied stays; send the receipt again"
            )
        case .success(let done)?:
            report = done
        case .failure(let failure)?:
            switch failure {
            case _ where failure.isUnknownTransaction:
                throw APIError(
                    .unprocessableContent, .unknownTransaction,
                    "the App Store does not know transaction \(transactionId) of the receipt in \(environment.rawValue)")
            case .appStore(let error):
                throw APIError(
                    .badGateway, .appStoreUnavailable,
                    "the App Store did not answer the history of the receipt's transaction: \(UntrustedText.escaped(error.message, limit: 300))")
            case .storage:
                throw APIError(.serviceUnavailable, .storageUnavailable, "the purchases could not be stored; send the receipt again")
            }
        }
        if report.linked.isEmpty, let first = report.refused.first {
            throw APIError(.conflict, .init(rawValue: first.code), first.message)
        }
        guard !report.linked.isEmpty else {
            throw APIError(
                .unprocessableContent, .noPurchases,
                "the App Store holds no purchase of the receipt's account (transaction \(transactionId)) in \(environment.rawValue): there is nothing to migrate"
            )
        }
        return try await answer(report, receipt: verified, customerId: customerId, key: key)
    }

    /// `{"customerId", "bundleId", "environment", "receipt": {…}, "import": {…}, "customer": <GET /v1/customers/{id}>}`.
    func answer(_ report: AccountImporter.Report, receipt: ReceiptVerifier.Verified, customerId: String, key: VerifierKey) async throws -> Response {
        struct Head: Encodable {
            struct Receipt: Encodable {
                var creationDate: Date?
                var transactionId: String
                var inAppPurchases: Int
                var signedBy: String
            }
            var customerId: String
            var bundleId: String
            var environment: String
            var receipt: Receipt
            var `import`: AccountImporter.Report
        }
        let head = Head(
            customerId: customerId, bundleId: key.bundleId, environment: key.environment.rawValue,
            receipt: .init(
                creationDate: receipt.receipt.creationDate, transactionId: report.transactionId, inAppPurchases: receipt.receipt.inAppPurchases.count,
                signedBy: receipt.signedBy),
            import: report)
        var body = ByteBuffer(bytes: try AppStoreJSON.makeEncoder().encode(head))
        body.moveWriterIndex(to: body.writerIndex - 1)  // drop the closing brace
        body.writeString(#","customer":"#)
        switch await reader.read(customerId, bundleId: key.bundleId, environment: key.environment, now: now) {
        case .found(let customer): body.writeImmutableBuffer(customer)
        case .unknownCustomer: throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read; the purchases are stored")
        case .storageFailure: throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read; the purchases are stored")
        }
        body.writeString("}")
        return StorekeeperApplication.jsonResponse(encoded: body)
    }
}
