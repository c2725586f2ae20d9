public import AppStoreModels
import Foundation

/// A JWS decoded **without any verification**: for inspection tools and logs of rejected input, never for
/// deciding anything.
public struct UnverifiedJWS: Sendable {
    /// The protected header, as sent.
    public var header: JSONValue
    /// The payload, as sent.
    public var payload: JSONValue

    /// Splits and decodes a compact JWS. Fails with the verifier's error codes for size, shape, base64url and
    /// JSON problems; checks nothing else.
    public static func unsafeDecode(_ text: String) throws(VerificationError) -> UnverifiedJWS {
        let jws = try CompactJWS(parsing: text, checkingSignatureLength: false)
        let decoder = JSONDecoder()
        let header: JSONValue
        let payload: JSONValue
        let headerBytes = try jws.headerBytes()
        do {
            header = try decoder.decode(JSONValue.self, from: Data(headerBytes))
        } catch {
            throw VerificationError(.malformedHeader, "protected header is not JSON")
        }
        do {
            payload = try decoder.decode(JSONValue.self, from: Data(jws.payloadBytes))
        } catch {
            throw VerificationError(.malformedPayload, "payload is not JSON")
        }
        return UnverifiedJWS(header: header, payload: payload)
    }

    /// Only the payload of a compact JWS, decoded **without any verification** and without decoding the header
    /// (whose `x5c` is most of its bytes): for routing a request to the verifier that will then check everything.
    public static func unsafeDecodePayload(_ text: String) throws(VerificationError) -> JSONValue {
        let jws = try CompactJWS(parsing: text, checkingSignatureLength: false)
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(jws.payloadBytes))
        } catch {
            throw VerificationError(.malformedPayload, "payload is not JSON")
        }
    }

    /// Only the payload of a compact JWS, decoded as `type` **without any verification** (no header decoded, no
    /// signature checked): for routing a request to the verifier that will then check everything. A payload that is
    /// not JSON, or not of that shape, fails with `malformed-payload` naming the field, never quoting the input.
    public static func unsafeDecodePayload<T: Decodable & Sendable>(_ text: String, as type: T.Type) throws(VerificationError) -> T {
        try unsafeDecode(text, as: type).payload
    }

    /// A compact JWS split and its payload decoded as `type` **without any verification**, kept together so that the
    /// verifier this routes it to checks the signature over the bytes this payload was decoded from and does not
    /// decode them again (``SignedDataVerifier/verifyNotification(_:)-(UnverifiedSignedData<NotificationPayload>)``).
    /// Fails as ``unsafeDecodePayload(_:as:)`` does.
    public static func unsafeDecode<T: Decodable & Sendable>(_ text: String, as type: T.Type) throws(VerificationError) -> UnverifiedSignedData<T> {
        let jws = try CompactJWS(parsing: text, checkingSignatureLength: false)
        do {
            return UnverifiedSignedData(payload: try SignedDataVerifier.decode(type, from: jws.payloadBytes, AppStoreJSON.makeDecoder()), jws: jws)
        } catch let error as DecodingError {
            throw VerificationError(.malformedPayload, "payload is not a \(type) (\(Self.describe(error)))")
        } catch {
            throw VerificationError(.malformedPayload, "payload is not JSON")
        }
    }

    /// Where decoding failed, by our own field names (never the input's values).
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return keys.isEmpty ? "the payload" : UntrustedText.escaped(keys.joined(separator: "."), limit: 80)
        }
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context): return "\(path(context)) has the wrong type"
        case .keyNotFound(let key, let context):
            return "\(UntrustedText.escaped(key.stringValue, limit: 40)) is missing from \(path(context))"
        case .dataCorrupted(let context): return context.codingPath.isEmpty ? "not JSON" : "\(path(context)) is not valid"
        @unknown default: return "not valid"
        }
    }

    /// What kind of App Store signed data the payload looks like, judged from its fields.
    public var apparentKind: SignedDataKind? {
        guard case .object(let fields) = payload else { return nil }
        if fields["notificationType"] != nil { return .notification }
        if fields["transactionId"] != nil { return .transaction }
        if fields["autoRenewStatus"] != nil || fields["autoRenewProductId"] != nil { return .renewalInfo }
        if fields["receiptType"] != nil || fields["receiptCreationDate"] != nil { return .appTransaction }
        return nil
    }
}

/// A compact JWS and its payload, decoded **without any verification** (``UnverifiedJWS/unsafeDecode(_:as:)``): for
/// routing it to the ``SignedDataVerifier`` of the app it names, which takes it as it is.
public struct UnverifiedSignedData<Payload: Decodable & Sendable>: Sendable {
    /// The payload, as sent: nothing in it is verified.
    public let payload: Payload
    let jws: CompactJWS

    /// The compact JWS, as received.
    public var text: String { jws.text }
}

/// The kinds of signed data the App Store produces.
public enum SignedDataKind: String, Sendable, CaseIterable {
    case notification
    case transaction
    case renewalInfo = "renewal-info"
    case appTransaction = "app-transaction"
}
