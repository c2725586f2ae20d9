import AppStoreModels

extension SignedDataVerifier {
    /// Checks a notification's bundle ID, app Apple ID and environment, taken from whichever of `data`, `summary`,
    /// `externalPurchaseToken` and `appData` it carries (exactly one). Returns the claims left unchecked.
    func checkClaims(of payload: NotificationPayload) throws(VerificationError) -> [String] {
        guard let claims = payload.appClaims else {
            throw VerificationError(
                .malformedPayload,
                payload.claimFields.isEmpty
                    ? "notification has none of data, summary, externalPurchaseToken, appData, so its app and environment are unknown"
                    : "notification has \(payload.claimFields.joined(separator: " and ")); exactly one is allowed"
            )
        }
        var unchecked = try checkBundleID(claims.bundleId, field: "\(claims.field).bundleId")
        unchecked += try checkAppAppleID(claims.appAppleId, environment: claims.environment, field: "\(claims.field).appAppleId")
        unchecked += try checkEnvironment(claims.environment, field: "\(claims.field).environment")
        return unchecked
    }

    func checkBundleID(_ actual: String?, field: String = "bundleId") throws(VerificationError) -> [String] {
        guard let expected = configuration.bundleID else { return ["bundleId"] }
        guard actual == expected else {
            throw VerificationError(
                .bundleIDMismatch,
                "\(field) is \(Self.quote(actual)); expected '\(expected)'"
            )
        }
        return []
    }

    /// Production payloads must carry the expected app Apple ID; sandbox ones usually have none, but one that is
    /// present must match.
    func checkAppAppleID(
        _ actual: Int64?,
        environment: AppStoreEnvironment?,
        field: String = "appAppleId"
    ) throws(VerificationError) -> [String] {
        guard let expected = configuration.appAppleID else { return ["appAppleId"] }
        let required = (configuration.environment ?? environment) == .production
        if actual == nil && !required { return [] }
        guard actual == expected else {
            throw VerificationError(
                .appAppleIDMismatch,
                "\(field) is \(actual.map { String($0) } ?? "missing"); expected \(expected)"
            )
        }
        return []
    }

    func checkEnvironment(_ actual: AppStoreEnvironment?, field: String) throws(VerificationError) -> [String] {
        guard let expected = configuration.environment else { return ["environment"] }
        guard actual == expected else {
            throw VerificationError(
                .environmentMismatch,
                "\(field) is \(Self.quote(actual?.rawValue)); this verifier accepts '\(expected)' only"
            )
        }
        return []
    }

    /// A nested transaction must belong to the notification's app and environment.
    static func check(_ transaction: TransactionInfo, against data: NotificationData) throws(VerificationError) {
        if let bundleID = data.bundleId, transaction.bundleId != bundleID {
            throw VerificationError(
                .nestedDataMismatch,
                "signedTransactionInfo.bundleId \(quote(transaction.bundleId)) differs from data.bundleId \(quote(bundleID))"
            )
        }
        try checkSameEnvironment(transaction.environment, data.environment, "signedTransactionInfo")
    }

    /// A nested renewal info must match the notification's environment and the transaction's subscription.
    static func check(
        _ renewal: RenewalInfo,
        against data: NotificationData,
        transaction: TransactionInfo?
    ) throws(VerificationError) {
        try checkSameEnvironment(renewal.environment, data.environment, "signedRenewalInfo")
        if let transaction, renewal.originalTransactionId != transaction.originalTransactionId {
            throw VerificationError(
                .nestedDataMismatch,
                "signedRenewalInfo.originalTransactionId \(quote(renewal.originalTransactionId)) differs from signedTransactionInfo's \(quote(transaction.originalTransactionId))"
            )
        }
    }

    /// A nested app transaction must belong to the notification's app and environment.
    static func check(_ appTransaction: AppTransaction, against appData: NotificationAppData) throws(VerificationError) {
        if let bundleID = appData.bundleId, appTransaction.bundleId != bundleID {
            throw VerificationError(
                .nestedDataMismatch,
                "signedAppTransactionInfo.bundleId \(quote(appTransaction.bundleId)) differs from appData.bundleId \(quote(bundleID))"
            )
        }
        try checkSameEnvironment(appTransaction.receiptType, appData.environment, "signedAppTransactionInfo")
    }

    private static func checkSameEnvironment(
        _ nested: AppStoreEnvironment?,
        _ outer: AppStoreEnvironment?,
        _ name: String
    ) throws(VerificationError) {
        if let nested, let outer, nested != outer {
            throw VerificationError(
                .nestedDataMismatch,
                "\(name) environment '\(nested)' differs from the notification's '\(outer)'"
            )
        }
    }

    /// A claim as a message quotes it: escaped and bounded, since it is not verified yet.
    static func quote(_ value: String?) -> String {
        UntrustedText.quoted(value)
    }
}
