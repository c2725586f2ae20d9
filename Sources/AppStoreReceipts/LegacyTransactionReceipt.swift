public import Foundation

/// A StoreKit 1 transaction receipt (`SKPaymentTransaction.transactionReceipt`, deprecated since iOS 7): base64 of a
/// NeXTSTEP-style property list whose `purchase-info` is base64 of another, holding `transaction-id`. Unsigned in
/// practice: its transaction ID is only a key to ask the App Store Server API with (Get Transaction History verifies
/// what comes back).
public enum LegacyTransactionReceipt {
    /// The receipt's `transaction-id` (digits).
    public static func transactionId(_ input: [UInt8]) throws(ReceiptError) -> String {
        guard input.count <= 1 << 20 else { throw ReceiptError(.tooLarge, "\(input.count) bytes: no transaction receipt is over 1 MiB") }
        let outer = try decoded(input, "the receipt")
        guard let info = value(of: "purchase-info", in: outer) else {
            throw ReceiptError(.malformedLegacyReceipt, "the transaction receipt has no \"purchase-info\" = \"…\"; entry")
        }
        let inner = try decoded(Array(info.utf8), "its purchase-info")
        guard let id = value(of: "transaction-id", in: inner), !id.isEmpty, id.allSatisfy(\.isASCII), id.allSatisfy(\.isNumber) else {
            throw ReceiptError(.malformedLegacyReceipt, "the purchase-info has no \"transaction-id\" = \"<digits>\"; entry")
        }
        return id
    }

    /// A transaction receipt in the old layout (what a simulator issues): `purchase-info` holding `transaction-id`,
    /// `original-transaction-id`, `product-id`, `purchase-date`, `quantity` and `bid`, beside `signature` (base64 of
    /// `signature`'s bytes, as given) and `environment`; base64 of the whole, as the app had it.
    public static func make(
        transactionId: String, originalTransactionId: String, productId: String, bundleId: String, purchaseDate: Date, quantity: Int,
        environment: String, signature: [UInt8]
    ) -> String {
        func quoted(_ text: String) -> String { text.replacingOccurrences(of: "\\", with: "").replacingOccurrences(of: "\"", with: "") }
        let info = """
            {
            \t"original-transaction-id" = "\(quoted(originalTransactionId))";
            \t"transaction-id" = "\(quoted(transactionId))";
            \t"product-id" = "\(quoted(productId))";
            \t"purchase-date" = "\(purchaseDate.formatted(.iso8601))";
            \t"quantity" = "\(quantity)";
            \t"bid" = "\(quoted(bundleId))";
            }
            """
        let outer = """
            {
            \t"signature" = "\(Data(signature).base64EncodedString())";
            \t"purchase-info" = "\(Data(info.utf8).base64EncodedString())";
            \t"environment" = "\(quoted(environment))";
            \t"signing-status" = "0";
            }
            """
        return Data(outer.utf8).base64EncodedString()
    }

    private static func decoded(_ bytes: [UInt8], _ name: String) throws(ReceiptError) -> String {
        let text = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
        guard let data = Data(base64Encoded: text), let decoded = String(data: data, encoding: .utf8) else {
            throw ReceiptError(.notBase64, "\(name) is not base64 of UTF-8 text")
        }
        return decoded
    }

    /// The value of `"key" = "value";` (the first one), value made of base64's characters, as Apple's libraries read it.
    private static func value(of key: String, in text: String) -> String? {
        guard let keyRange = text.range(of: "\"\(key)\"") else { return nil }
        var rest = text[keyRange.upperBound...].drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard rest.first == "=" else { return nil }
        rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard rest.first == "\"" else { return nil }
        let value = rest.dropFirst().prefix { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "/" || $0 == "=") }
        guard rest.dropFirst(value.count + 1).hasPrefix("\";") else { return nil }
        return String(value)
    }
}
