public import Foundation

/// A decoded App Store Server Notification V2: Apple's `responseBodyV2DecodedPayload` (APPSTORE-SPEC §2.2).
///
/// Exactly one of ``data``, ``summary``, ``externalPurchaseToken`` and ``appData`` is present.
public struct NotificationPayload: Codable, Hashable, Sendable {
    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    /// Unique per notification; retries reuse it.
    public var notificationUUID: String
    /// `"2.0"`.
    public var version: String?
    public var signedDate: Date?
    /// In-app purchase events.
    public var data: NotificationData?
    /// `RENEWAL_EXTENSION`/`SUMMARY` only.
    public var summary: NotificationSummary?
    /// `EXTERNAL_PURCHASE_TOKEN` only.
    public var externalPurchaseToken: ExternalPurchaseToken?
    /// `RESCIND_CONSENT` only.
    public var appData: NotificationAppData?

    public init(
        notificationType: NotificationType,
        subtype: NotificationSubtype? = nil,
        notificationUUID: String,
        version: String? = "2.0",
        signedDate: Date? = nil,
        data: NotificationData? = nil,
        summary: NotificationSummary? = nil,
        externalPurchaseToken: ExternalPurchaseToken? = nil,
        appData: NotificationAppData? = nil
    ) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.version = version
        self.signedDate = signedDate
        self.data = data
        self.summary = summary
        self.externalPurchaseToken = externalPurchaseToken
        self.appData = appData
    }
}

/// `data` of a notification: an in-app purchase event.
public struct NotificationData: Codable, Hashable, Sendable {
    /// Missing in sandbox.
    public var appAppleId: Int64?
    public var bundleId: String?
    public var bundleVersion: String?
    public var environment: AppStoreEnvironment?
    /// A transaction JWS.
    public var signedTransactionInfo: String?
    /// A renewal info JWS (auto-renewable subscriptions only).
    public var signedRenewalInfo: String?
    /// Auto-renewable subscriptions only, as of the notification's `signedDate`.
    public var status: SubscriptionStatus?
    /// `CONSUMPTION_REQUEST` only.
    public var consumptionRequestReason: ConsumptionRequestReason?

    public init(
        appAppleId: Int64? = nil,
        bundleId: String? = nil,
        bundleVersion: String? = nil,
        environment: AppStoreEnvironment? = nil,
        signedTransactionInfo: String? = nil,
        signedRenewalInfo: String? = nil,
        status: SubscriptionStatus? = nil,
        consumptionRequestReason: ConsumptionRequestReason? = nil
    ) {
        self.appAppleId = appAppleId
        self.bundleId = bundleId
        self.bundleVersion = bundleVersion
        self.environment = environment
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
        self.status = status
        self.consumptionRequestReason = consumptionRequestReason
    }
}

/// `summary` of a `RENEWAL_EXTENSION`/`SUMMARY` notification: a finished mass renewal-date extension.
public struct NotificationSummary: Codable, Hashable, Sendable {
    public var environment: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var productId: String?
    public var requestIdentifier: String?
    public var storefrontCountryCodes: [String]?
    public var succeededCount: Int64?
    public var failedCount: Int64?

    public init(
        environment: AppStoreEnvironment? = nil,
        appAppleId: Int64? = nil,
        bundleId: String? = nil,
        productId: String? = nil,
        requestIdentifier: String? = nil,
        storefrontCountryCodes: [String]? = nil,
        succeededCount: Int64? = nil,
        failedCount: Int64? = nil
    ) {
        self.environment = environment
        self.appAppleId = appAppleId
        self.bundleId = bundleId
        self.productId = productId
        self.requestIdentifier = requestIdentifier
        self.storefrontCountryCodes = storefrontCountryCodes
        self.succeededCount = succeededCount
        self.failedCount = failedCount
    }
}

/// `externalPurchaseToken` of an `EXTERNAL_PURCHASE_TOKEN` notification.
public struct ExternalPurchaseToken: Codable, Hashable, Sendable {
    public var externalPurchaseId: String?
    public var tokenCreationDate: Date?
    public var appAppleId: Int64?
    public var bundleId: String?
    /// Custom-link tokens only.
    public var tokenExpirationDate: Date?
    /// Custom-link tokens only.
    public var tokenType: ExternalPurchaseTokenType?

    public init(
        externalPurchaseId: String? = nil,
        tokenCreationDate: Date? = nil,
        appAppleId: Int64? = nil,
        bundleId: String? = nil,
        tokenExpirationDate: Date? = nil,
        tokenType: ExternalPurchaseTokenType? = nil
    ) {
        self.externalPurchaseId = externalPurchaseId
        self.tokenCreationDate = tokenCreationDate
        self.appAppleId = appAppleId
        self.bundleId = bundleId
        self.tokenExpirationDate = tokenExpirationDate
        self.tokenType = tokenType
    }

    /// The payload carries no environment; like Apple's verifier, an `externalPurchaseId` that starts with
    /// `SANDBOX` means sandbox, anything else production.
    public var impliedEnvironment: AppStoreEnvironment {
        (externalPurchaseId ?? "").hasPrefix("SANDBOX") ? .sandbox : .production
    }
}

/// `appData` of a `RESCIND_CONSENT` notification.
public struct NotificationAppData: Codable, Hashable, Sendable {
    public var appAppleId: Int64?
    public var bundleId: String?
    public var environment: AppStoreEnvironment?
    /// An app transaction JWS.
    public var signedAppTransactionInfo: String?

    public init(
        appAppleId: Int64? = nil,
        bundleId: String? = nil,
        environment: AppStoreEnvironment? = nil,
        signedAppTransactionInfo: String? = nil
    ) {
        self.appAppleId = appAppleId
        self.bundleId = bundleId
        self.environment = environment
        self.signedAppTransactionInfo = signedAppTransactionInfo
    }
}

/// The body Apple POSTs to the notification URL: `responseBodyV2`.
public struct NotificationRequestBody: Codable, Hashable, Sendable {
    /// The notification JWS.
    public var signedPayload: String

    public init(signedPayload: String) {
        self.signedPayload = signedPayload
    }
}

extension NotificationRequestBody {
    /// Decodes the body as `JSONDecoder` would (the same value, or its error); the form Apple sends —
    /// `{"signedPayload":"<JWS>"}`, a JWS being base64url segments and dots, which JSON never escapes — is read in one
    /// pass (`FlatJSONScanner`), anything outside its plain shape by `JSONDecoder`.
    public init(json bytes: [UInt8]) throws {
        self = try FlatJSONScanner.decode(Data(bytes), fallback: AppStoreJSON.makeDecoder(), flat: Self.decodeFlat)
    }

    static let flatKeys = FlatJSONKeys(["signedPayload"])

    static func decodeFlat(_ bytes: UnsafeRawBufferPointer) throws -> NotificationRequestBody {
        var body = NotificationRequestBody(signedPayload: "")
        try FlatJSONScanner.readMembers(of: bytes, flatKeys, required: 1) { _, value in body.signedPayload = try value.string() }
        return body
    }

    /// The JWS of a body in the plain shape, `nil` for one left to `JSONDecoder`.
    static func plainSignedPayload(_ bytes: [UInt8]) -> String? {
        try? bytes.withUnsafeBytes(decodeFlat).signedPayload
    }
}
