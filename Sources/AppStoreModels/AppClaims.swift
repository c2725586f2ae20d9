/// Which app and environment a piece of signed data says it belongs to: what picks the verifier (and the API
/// credentials) for it, and what the verifier then checks.
///
/// For a notification the claims come from whichever of `data`, `summary`, `externalPurchaseToken` and `appData` it
/// carries (exactly one, APPSTORE-SPEC §2.2); an external purchase token has no `environment`, and, as in Apple's
/// verifier, an `externalPurchaseId` starting with `SANDBOX` means Sandbox, anything else Production. This is the one
/// place that rule is written.
public struct AppClaims: Hashable, Sendable {
    /// Where the claims were read: `data`, `summary`, `externalPurchaseToken`, `appData`, or the payload itself for
    /// a transaction.
    public var field: String
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: AppStoreEnvironment?

    public init(field: String, bundleId: String?, appAppleId: Int64?, environment: AppStoreEnvironment?) {
        self.field = field
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
    }

    /// Why the claims cannot name an app and environment, or `nil` when they can: a bundle ID of 1-255 ASCII letters,
    /// digits, `.`, `-` and `_`, and one of the known environments. Unverified values are quoted escaped and cut
    /// (``UntrustedText``).
    public var malformation: String? {
        guard let bundleId else { return "\(field).bundleId is missing" }
        guard Self.isWellFormed(bundleId: bundleId) else {
            return "\(field).bundleId \(UntrustedText.quoted(bundleId, limit: 64)) is not a bundle ID"
        }
        guard let environment else { return "\(field).environment is missing" }
        guard environment.isKnown else {
            return "\(field).environment \(UntrustedText.quoted(environment.rawValue, limit: 64)) is not an App Store environment"
        }
        return nil
    }

    /// Letters, digits, `.`, `-` (Apple's rule for bundle IDs) and `_` (seen in old ones), 1-255 of them.
    public static func isWellFormed(bundleId: String) -> Bool {
        (1...255).contains(bundleId.utf8.count)
            && bundleId.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
                case UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"): true
                default: false
                }
            }
    }
}

extension NotificationPayload {
    /// The fields of the payload that can carry the app's claims and are present.
    public var claimFields: [String] {
        [
            data.map { _ in "data" }, summary.map { _ in "summary" },
            externalPurchaseToken.map { _ in "externalPurchaseToken" }, appData.map { _ in "appData" },
        ].compactMap { $0 }
    }

    /// The app and environment the notification names, or `nil` unless exactly one of `data`, `summary`,
    /// `externalPurchaseToken` and `appData` is present (``claimFields`` says which are).
    public var appClaims: AppClaims? {
        guard claimFields.count == 1 else { return nil }
        if let data {
            return AppClaims(field: "data", bundleId: data.bundleId, appAppleId: data.appAppleId, environment: data.environment)
        }
        if let summary {
            return AppClaims(field: "summary", bundleId: summary.bundleId, appAppleId: summary.appAppleId, environment: summary.environment)
        }
        if let token = externalPurchaseToken {
            return AppClaims(
                field: "externalPurchaseToken", bundleId: token.bundleId, appAppleId: token.appAppleId,
                environment: token.impliedEnvironment
            )
        }
        guard let appData else { return nil }
        return AppClaims(field: "appData", bundleId: appData.bundleId, appAppleId: appData.appAppleId, environment: appData.environment)
    }
}

extension TransactionInfo {
    /// The app and environment the transaction names (a transaction carries no app Apple ID).
    public var appClaims: AppClaims {
        AppClaims(field: "transaction", bundleId: bundleId, appAppleId: nil, environment: environment)
    }
}
