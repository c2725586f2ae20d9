public import Crypto
import Foundation
import SwiftASN1
public import X509

/// Makes app receipts as the App Store lays them out (a DER PKCS#7 SignedData whose content is the SET of
/// `SEQUENCE { type, version, value }` attributes, the in-app entries as type 17, the signer's chain embedded), signed
/// with a P-256 key (ECDSA with SHA-256; the App Store's own are RSA): what the simulator issues and tests verify with
/// a ``ReceiptVerifier`` that pins the simulator's root. Never give a production verifier a test root.
public struct ReceiptSigner: Sendable {
    private let privateKey: P256.Signing.PrivateKey
    /// Leaf first, then its issuers.
    public let certificateChain: [Certificate]
    private let certificateDER: [[UInt8]]

    /// `certificateChain` starts with the leaf that `privateKey` belongs to.
    public init(privateKey: P256.Signing.PrivateKey, certificateChain: [Certificate]) throws(ReceiptError) {
        guard let leaf = certificateChain.first, leaf.publicKey == Certificate.PublicKey(privateKey.publicKey) else {
            throw ReceiptError(.unsupportedSignature, "the receipt signer's key does not match the first certificate of its chain")
        }
        var ders: [[UInt8]] = []
        for certificate in certificateChain {
            var serializer = DER.Serializer()
            do {
                try serializer.serialize(certificate)
            } catch {
                throw ReceiptError(.notPKCS7, "a certificate of the signer's chain does not serialize: \(error)")
            }
            ders.append(serializer.serializedBytes)
        }
        self.privateKey = privateKey
        self.certificateChain = certificateChain
        self.certificateDER = ders
    }

    /// A certificate's DER.
    public static func derBytes(of certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    /// The receipt's DER bytes (base64 them for what an app sends).
    public func sign(_ receipt: AppReceipt) throws(ReceiptError) -> [UInt8] {
        do {
            let content = try Self.payload(receipt)
            let signature = try privateKey.signature(for: content).derRepresentation
            return try signedData(content: content, signature: Array(signature))
        } catch let error as ReceiptError {
            throw error
        } catch {
            throw ReceiptError(.notPKCS7, "the receipt could not be encoded: \(error)")
        }
    }

    /// A DER ECDSA signature of `bytes` by the signer's key (a legacy transaction receipt's `signature`).
    public func signature(of bytes: [UInt8]) throws(ReceiptError) -> [UInt8] {
        do {
            return Array(try privateKey.signature(for: bytes).derRepresentation)
        } catch {
            throw ReceiptError(.unsupportedSignature, "signing failed")
        }
    }

    static let ecdsaWithSHA256: ASN1ObjectIdentifier = [1, 2, 840, 10_045, 4, 3, 2]

    /// ContentInfo { signedData, [0] SignedData { 1, {sha256}, {data, [0] content}, [0] certificates, {SignerInfo} } }.
    private func signedData(content: [UInt8], signature: [UInt8]) throws -> [UInt8] {
        let leaf = certificateChain[0]
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { info in
            try info.serialize(ReceiptParser.signedDataOID)
            try info.appendConstructedNode(identifier: ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)) { explicit in
                try explicit.appendConstructedNode(identifier: .sequence) { signed in
                    try signed.serialize(1)
                    try signed.appendConstructedNode(identifier: .set) { try Self.algorithm(.sha256, into: &$0) }
                    try signed.appendConstructedNode(identifier: .sequence) { encapsulated in
                        try encapsulated.serialize(ReceiptParser.dataOID)
                        try encapsulated.appendConstructedNode(identifier: ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)) {
                            try $0.serialize(ASN1OctetString(contentBytes: content[...]))
                        }
                    }
                    signed.appendConstructedNode(identifier: ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)) { certificates in
                        for der in certificateDER { certificates.serializeRawBytes(der) }
                    }
                    try signed.appendConstructedNode(identifier: .set) { signers in
                        try signers.appendConstructedNode(identifier: .sequence) { signer in
                            try signer.serialize(1)
                            try signer.appendConstructedNode(identifier: .sequence) { sid in
                                try sid.serialize(leaf.issuer)
                                try sid.serialize(ArraySlice(leaf.serialNumber.bytes))
                            }
                            try Self.algorithm(.sha256, into: &signer)
                            try Self.algorithm(Self.ecdsaWithSHA256, into: &signer, null: false)
                            try signer.serialize(ASN1OctetString(contentBytes: signature[...]))
                        }
                    }
                }
            }
        }
        return serializer.serializedBytes
    }

    private static func algorithm(_ oid: ASN1ObjectIdentifier, into serializer: inout DER.Serializer, null: Bool = true) throws {
        try serializer.appendConstructedNode(identifier: .sequence) { algorithm in
            try algorithm.serialize(oid)
            if null { try algorithm.serialize(ASN1Null()) }
        }
    }

    // MARK: - The payload

    /// The receipt's attributes as the App Store writes them: strings as UTF8String (dates as IA5String, RFC 3339),
    /// numbers as INTEGER, each in an OCTET STRING, the SET in DER order.
    static func payload(_ receipt: AppReceipt) throws -> [UInt8] {
        var fields: [(Int64, [UInt8])] = []
        if let type = receipt.receiptType { fields.append((0, try utf8(type))) }
        fields.append((2, try utf8(receipt.bundleId)))
        if let version = receipt.applicationVersion { fields.append((3, try utf8(version))) }
        if let created = receipt.creationDate { fields.append((12, try date(created))) }
        for purchase in receipt.inAppPurchases { fields.append((17, try inApp(purchase))) }
        if let original = receipt.originalApplicationVersion { fields.append((19, try utf8(original))) }
        if let expires = receipt.expirationDate { fields.append((21, try date(expires))) }
        return try attributeSet(fields)
    }

    private static func inApp(_ purchase: InAppPurchase) throws -> [UInt8] {
        var fields: [(Int64, [UInt8])] = []
        if let quantity = purchase.quantity { fields.append((1701, try integer(Int64(quantity)))) }
        if let product = purchase.productId { fields.append((1702, try utf8(product))) }
        if let id = purchase.transactionId { fields.append((1703, try utf8(id))) }
        // Apple writes an empty string for a date it does not have; a missing field reads the same.
        if let date = purchase.purchaseDate { fields.append((1704, try self.date(date))) }
        if let original = purchase.originalTransactionId { fields.append((1705, try utf8(original))) }
        if let date = purchase.originalPurchaseDate { fields.append((1706, try self.date(date))) }
        if let date = purchase.expiresDate { fields.append((1708, try self.date(date))) }
        if let line = purchase.webOrderLineItemId { fields.append((1711, try integer(line))) }
        if let date = purchase.cancellationDate { fields.append((1712, try self.date(date))) }
        if let intro = purchase.isInIntroOfferPeriod { fields.append((1719, try integer(intro ? 1 : 0))) }
        return try attributeSet(fields)
    }

    /// A DER SET of attributes: its elements sorted by their encodings, as DER wants.
    private static func attributeSet(_ fields: [(Int64, [UInt8])]) throws -> [UInt8] {
        var elements: [[UInt8]] = []
        for (type, value) in fields {
            var element = DER.Serializer()
            try element.appendConstructedNode(identifier: .sequence) { sequence in
                try sequence.serialize(type)
                try sequence.serialize(1)
                try sequence.serialize(ASN1OctetString(contentBytes: value[...]))
            }
            elements.append(element.serializedBytes)
        }
        elements.sort { $0.lexicographicallyPrecedes($1) }
        var set = DER.Serializer()
        set.appendConstructedNode(identifier: .set) { for element in elements { $0.serializeRawBytes(element) } }
        return set.serializedBytes
    }

    private static func utf8(_ text: String) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(ASN1UTF8String(text))
        return serializer.serializedBytes
    }

    private static func integer(_ value: Int64) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(value)
        return serializer.serializedBytes
    }

    private static func date(_ date: Date) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(try ASN1IA5String(date.formatted(.iso8601)))
        return serializer.serializedBytes
    }
}
