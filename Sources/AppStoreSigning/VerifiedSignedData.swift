public import AppStoreModels
public import Foundation

/// A payload whose signature, certificate chain and claims passed verification, with how it was verified.
public struct VerifiedSignedData<Payload: Sendable>: Sendable {
    /// The decoded payload.
    public var payload: Payload
    /// The exact JWS that was verified.
    public var jws: String
    /// The moment at which certificate validity was judged.
    public var certificatesCheckedAt: Date
    /// Why that moment: `signedDate`, `receiptCreationDate`, `current time`, `current time (no signedDate)`
    /// or `fixed time`.
    public var certificatesCheckedAtSource: String
    /// Whether the chain came from the cache (so only the signature was checked cryptographically).
    public var chainFromCache: Bool
    /// Claims that were not checked because the configuration did not say what to expect.
    public var uncheckedClaims: [String]
}

/// A verified notification and its nested signed data, each verified too.
public struct VerifiedNotification: Sendable {
    /// The notification payload.
    public var notification: VerifiedSignedData<NotificationPayload>
    /// `data.signedTransactionInfo`, verified, when present.
    public var transaction: VerifiedSignedData<TransactionInfo>?
    /// `data.signedRenewalInfo`, verified, when present.
    public var renewalInfo: VerifiedSignedData<RenewalInfo>?
    /// `appData.signedAppTransactionInfo`, verified, when present.
    public var appTransaction: VerifiedSignedData<AppTransaction>?

    /// The notification payload.
    public var payload: NotificationPayload { notification.payload }
}
