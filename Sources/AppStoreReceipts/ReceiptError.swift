/// Why a receipt was refused: a code a program can switch over and a message that names what was wrong. Never a
/// silent `nil`: a receipt either parses and verifies, or says why not.
public struct ReceiptError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable, Codable {
        /// The text is not base64 (nor raw PKCS#7 bytes).
        case notBase64 = "not-base64"
        /// A JWS (StoreKit 2's signed data) was given where an app receipt was expected.
        case jwsGiven = "jws-given"
        /// Larger than any receipt (``ReceiptParser/maximumBytes``).
        case tooLarge = "too-large"
        /// Not a PKCS#7 SignedData, or a part of it is missing or malformed (the message says which).
        case notPKCS7 = "not-pkcs7"
        /// The signed payload is not a receipt's set of attributes (the message says where).
        case malformedPayload = "malformed-payload"
        /// No signer, no certificate matching the signer, or an algorithm receipts never use.
        case unsupportedSignature = "unsupported-signature"
        /// The signature does not match the content (the receipt was changed, or signed by another key).
        case signatureInvalid = "signature-invalid"
        /// The certificates do not chain to the pinned root (or to the pinned Xcode certificate).
        case untrustedChain = "untrusted-chain"
        /// The leaf lacks Apple's receipt-signing OID, or the intermediate Apple's WWDR OID.
        case missingAppleOID = "missing-apple-oid"
        /// A certificate of the chain was not valid at the moment judged.
        case certificateExpired = "certificate-expired"
        /// A legacy transaction receipt without its `purchase-info` or `transaction-id`.
        case malformedLegacyReceipt = "malformed-legacy-receipt"
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
