package import StorekeeperHTTP

/// The error codes of Storekeeper's HTTP API (``APIError``'s `error.code`): each spelled once, here. Codes that come
/// from a use case (a refused notification's verification code, a refused submission's) are passed through as they are.
extension APIError.Code {
    /// An API key is missing, or is not one of the configured keys (401).
    package static let unauthorized = Self(rawValue: "unauthorized")
    /// The route takes an admin API key (403).
    package static let adminOnly = Self(rawValue: "admin-only")
    /// The key's scope does not reach these routes: a support key on the app API, an app key on the support API (403).
    package static let wrongScope = Self(rawValue: "wrong-scope")
    /// A support search found nothing in the ledger, and Look Up Order ID failed at the App Store (502).
    package static let orderLookupFailed = Self(rawValue: "order-lookup-failed")
    /// Storekeeper's own checks refused a support action (Apple's limits, a family member's copy) (409).
    package static let extensionRefused = Self(rawValue: "extension-refused")
    /// The App Store refused a support action; the message gives Apple's error name, code and meaning (409).
    package static let appStoreRefused = Self(rawValue: "app-store-refused")
    /// The App Store could not be reached or failed (502).
    package static let appStoreUnavailable = Self(rawValue: "app-store-unavailable")
    /// The customer has no such subscription in the app and environment (404).
    package static let unknownSubscription = Self(rawValue: "unknown-subscription")
    /// The customer has no promotional grant with that ID in the app and environment (404).
    package static let unknownGrant = Self(rawValue: "unknown-grant")
    /// A dashboard form sent a second time (409): nothing is done again.
    package static let formSentAlready = Self(rawValue: "form-sent-already")
    /// A dashboard action form without its one-time token (403).
    package static let formTokenMissing = Self(rawValue: "form-token-missing")
    /// A one-app key's write names another app (403).
    package static let otherApp = Self(rawValue: "other-app")
    /// The promotional grant has expired: nothing left to revoke (409).
    package static let grantExpired = Self(rawValue: "grant-expired")
    /// The customer has as many active promotional grants as allowed (409).
    package static let tooManyGrants = Self(rawValue: "too-many-grants")
    /// The promotional grant was revoked already (409).
    package static let grantRevoked = Self(rawValue: "grant-revoked")
    /// The App Store knows no such mass extension (404).
    package static let unknownMassExtension = Self(rawValue: "unknown-mass-extension")
    /// A support search found no customer (404).
    package static let noMatch = Self(rawValue: "no-match")
    /// An app this server is not configured for.
    package static let unknownApp = Self(rawValue: "unknown-app")
    /// An admin route needs bundleId and environment to pick one app with credentials.
    package static let ambiguousApp = Self(rawValue: "ambiguous-app")
    /// An admin key reads one app's customers: bundleId is required when several apps are configured.
    package static let bundleIdRequired = Self(rawValue: "bundle-id-required")
    /// The app does not accept this environment.
    package static let unknownEnvironment = Self(rawValue: "unknown-environment")
    /// The app has no App Store Server API credentials (`serverAPI`).
    package static let noCredentials = Self(rawValue: "no-credentials")
    /// A customer ID outside 1-128 ASCII letters, digits and `-_.@:`.
    package static let invalidCustomerId = Self(rawValue: "invalid-customer-id")
    /// No such customer for the app and environment (404).
    package static let unknownCustomer = Self(rawValue: "unknown-customer")
    /// A query parameter the route does not take.
    package static let unknownParameter = Self(rawValue: "unknown-parameter")
    /// A query parameter given twice.
    package static let repeatedParameter = Self(rawValue: "repeated-parameter")
    /// A query parameter whose value the route cannot read.
    package static let invalidParameter = Self(rawValue: "invalid-parameter")
    /// A body that is not the JSON the route takes.
    package static let malformedBody = Self(rawValue: "malformed-body")
    /// A body over the route's limit (413).
    package static let bodyTooLarge = Self(rawValue: "body-too-large")
    /// A body that did not arrive in time (408).
    package static let bodyTimeout = Self(rawValue: "body-timeout")
    /// Nothing is served at that path (404).
    package static let noSuchRoute = Self(rawValue: "no-such-route")
    /// The path takes another method (405, with `Allow`).
    package static let methodNotAllowed = Self(rawValue: "method-not-allowed")
    /// The ledger could not be read or written; retry (503).
    package static let storageUnavailable = Self(rawValue: "storage-unavailable")
    /// An events cursor this server did not give (400).
    package static let invalidCursor = Self(rawValue: "invalid-cursor")
    /// The key already holds as many waiting long polls as it may, or the server does (429, with `Retry-After`).
    package static let tooManyWaits = Self(rawValue: "too-many-waits")
    /// No event with this ID (404).
    package static let unknownEvent = Self(rawValue: "unknown-event")
    /// No webhook endpoint with this name (404).
    package static let unknownEndpoint = Self(rawValue: "unknown-endpoint")
    /// Reconciliation stopped: the App Store or the ledger could not be read (502).
    package static let reconcileFailed = Self(rawValue: "reconcile-failed")
}

extension APIError.Code {
    /// The App Store's consumption request is unknown to the key's apps (404).
    package static let unknownConsumptionRequest = Self(rawValue: "unknown-consumption-request")
    /// The consumption request is not waiting for a person: the policy decided it, it was answered, or its 12 hours
    /// passed (409).
    package static let consumptionRequestClosed = Self(rawValue: "consumption-request-closed")
}

extension APIError.Code {
    /// The app receipt does not parse or verify; the message starts with the receipt's own reason (`signature-invalid`,
    /// `untrusted-chain`, …) (400).
    package static let invalidReceipt = Self(rawValue: "invalid-receipt")
    /// The receipt verifies but holds no in-app purchase, or only Xcode's: nothing to migrate (422).
    package static let noPurchases = Self(rawValue: "no-purchases")
    /// The App Store does not know the transaction ID the receipt (or the request) gave (422).
    package static let unknownTransaction = Self(rawValue: "unknown-transaction")
}
