import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import ArgumentParser
import Foundation
import X509

/// Replaces signed fields (`signedTransactionInfo`, `signedTransactions`, `signedRenewalInfo`, `signedPayload`,
/// `signedAppTransactionInfo`) by their payloads: `{"verified": true, "payload": …}`, or
/// `{"verified": false, "error": …, "unverifiedPayload": …}` when verification fails.
struct SignedFieldDecoder {
    let verifier: SignedDataVerifier

    func decode(_ value: JSONValue, field: String?) async -> JSONValue {
        switch value {
        case .object(let fields):
            var result: [String: JSONValue] = [:]
            for (key, child) in fields { result[key] = await decode(child, field: key) }
            return .object(result)
        case .array(let items):
            var result: [JSONValue] = []
            for item in items { result.append(await decode(item, field: field)) }
            return .array(result)
        case .string(let text) where field?.hasPrefix("signed") == true && text.split(separator: ".").count == 3:
            return await verify(text, field: field!)
        default:
            return value
        }
    }

    private func verify(_ jws: String, field: String) async -> JSONValue {
        do {
            let payload: JSONValue
            switch field {
            case "signedRenewalInfo": payload = try JSONOutput.value(try await verifier.verifyRenewalInfo(jws).payload)
            case "signedPayload": payload = try JSONOutput.value(try await verifier.verifyNotification(jws).payload)
            case "signedAppTransactionInfo": payload = try JSONOutput.value(try await verifier.verifyAppTransaction(jws).payload)
            default: payload = try JSONOutput.value(try await verifier.verifyTransaction(jws).payload)
            }
            return .object(["verified": .bool(true), "payload": payload])
        } catch {
            let unverified = (try? UnverifiedJWS.unsafeDecode(jws).payload) ?? .null
            return .object(["verified": .bool(false), "error": .string("\(error)"), "unverifiedPayload": unverified])
        }
    }
}

// MARK: - Endpoints
