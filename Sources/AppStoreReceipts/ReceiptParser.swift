import Foundation
public import SwiftASN1
import Synchronization
public import X509

/// A PKCS#7 SignedData app receipt taken apart, before any check: the payload's fields, the signed content bytes, the
/// embedded certificates and the signer's description. ``ReceiptVerifier`` judges it.
public struct ParsedReceipt: Sendable {
    public var receipt: AppReceipt
    /// The bytes the signature covers when there are no signed attributes (the payload).
    public var content: [UInt8]
    /// The certificates the receipt carries (leaf, intermediate, root for the App Store's; one for Xcode's).
    public var certificates: [Certificate]
    /// Their DER, in the same order.
    public var certificateDER: [[UInt8]]
    public var signer: Signer

    /// The one SignerInfo of the receipt.
    public struct Signer: Sendable {
        /// IssuerAndSerialNumber: which certificate signed.
        public var issuer: DistinguishedName
        public var serialNumber: Certificate.SerialNumber
        /// `digestAlgorithm`'s OID (SHA-1 or SHA-256 for receipts).
        public var digestAlgorithm: ASN1ObjectIdentifier
        /// `signatureAlgorithm`'s OID (`rsaEncryption`, or `sha…WithRSAEncryption`).
        public var signatureAlgorithm: ASN1ObjectIdentifier
        public var signature: [UInt8]
        /// The signed attributes' DER re-tagged as a SET (what is signed when they are present), and the
        /// message-digest attribute's value.
        public var signedAttributes: [UInt8]?
        public var messageDigest: [UInt8]?
    }
}

/// Parses app receipts: base64 (as apps send them) or raw bytes, DER (the App Store's) or BER (Xcode's indefinite
/// lengths and nested OCTET STRINGs). Structure only: ``ReceiptVerifier`` checks the signature and the chain.
public enum ReceiptParser {
    /// Certificates already parsed, by their DER: receipts of one period carry the same three.
    static let parsedCertificates = CertificateMemo()

    final class CertificateMemo: Sendable {
        private let parsed = Mutex<[[UInt8]: Certificate]>([:])
        static let capacity = 64

        func certificate(_ der: [UInt8]) throws -> Certificate {
            if let known = parsed.withLock({ $0[der] }) { return known }
            let certificate = try Certificate(derEncoded: der)
            parsed.withLock { memo in
                if memo.count >= Self.capacity { memo.removeAll() }
                memo[der] = certificate
            }
            return certificate
        }
    }

    /// The largest receipt taken: real ones are a few kilobytes, a few hundred purchases some hundred.
    public static let maximumBytes = 4 << 20

    /// Bytes from base64 text (whitespace and newlines ignored) or raw DER/BER bytes.
    public static func bytes(of input: [UInt8]) throws(ReceiptError) -> [UInt8] {
        guard input.count <= maximumBytes * 4 / 3 + 4 else {
            throw ReceiptError(.tooLarge, "\(input.count) bytes: no receipt is over \(maximumBytes >> 20) MiB")
        }
        // Raw PKCS#7: a SEQUENCE (definite or indefinite length).
        if input.first == 0x30 { return input }
        // Base64, white space (line breaks of a pasted receipt) left out, byte by byte.
        let text = input.filter { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
        if text.starts(with: Array("eyJ".utf8)), text.lazy.filter({ $0 == UInt8(ascii: ".") }).count == 2 {
            throw ReceiptError(.jwsGiven, "this is a JWS (StoreKit 2 signed data), not an app receipt: verify it as a transaction")
        }
        guard let data = Data(base64Encoded: Data(text)), !data.isEmpty else {
            throw ReceiptError(.notBase64, "the receipt is neither base64 nor PKCS#7 bytes (\(input.count) bytes)")
        }
        return [UInt8](data)
    }

    public static func parse(_ input: [UInt8]) throws(ReceiptError) -> ParsedReceipt {
        let bytes = try bytes(of: input)
        guard bytes.count <= maximumBytes else {
            throw ReceiptError(.tooLarge, "\(bytes.count) bytes: no receipt is over \(maximumBytes >> 20) MiB")
        }
        do {
            return try parseSignedData(bytes)
        } catch let error as ReceiptError {
            throw error
        } catch let error as ASN1Error {
            throw ReceiptError(.notPKCS7, "not a PKCS#7 SignedData: the DER/BER does not parse (\(Self.describe(error)))")
        } catch {
            throw ReceiptError(.notPKCS7, "not a PKCS#7 SignedData: \(Self.plain(error))")
        }
    }

    /// An error in words, without the source file and line swift-asn1 and swift-certificates put in theirs.
    static func plain(_ error: any Error) -> String {
        if let error = error as? ASN1Error { return describe(error) }
        if let error = error as? CertificateError { return describe(error) }
        return "\(error)".split(separator: " ").filter { !$0.contains(".swift:") }.joined(separator: " ")
    }

    /// swift-certificates' error in words: its code only (its reason repeats the certificate's OIDs and bytes).
    static func describe(_ error: CertificateError) -> String {
        switch error.code {
        case .unsupportedSignatureAlgorithm: "a signature algorithm that is not supported"
        case .unsupportedPublicKeyAlgorithm: "a public key algorithm that is not supported"
        case .invalidSignatureForCertificate: "a signature that does not verify"
        case .incorrectOIDForExtension: "an extension with an unexpected OID"
        case .unsupportedDigestAlgorithm: "a digest algorithm that is not supported"
        case .duplicateOID: "an extension given twice"
        default: "malformed"
        }
    }

    /// swift-asn1's error in words, without its source file and line.
    static func describe(_ error: ASN1Error) -> String {
        switch error.code {
        case .truncatedASN1Field: "a field is cut short"
        case .invalidASN1Object: "an invalid object"
        case .unexpectedFieldType: "a field of an unexpected type"
        case .unsupportedFieldLength: "a length too large"
        case .invalidASN1IntegerEncoding: "an invalid INTEGER"
        case .invalidStringRepresentation: "an invalid string"
        case .tooFewOIDComponents: "an OBJECT IDENTIFIER too short"
        default: "malformed"
        }
    }

    static let signedDataOID: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 7, 2]
    static let dataOID: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 7, 1]
    static let messageDigestOID: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 9, 4]

    private static func parseSignedData(_ bytes: [UInt8]) throws -> ParsedReceipt {
        let root = try BER.parse(bytes)
        let info = try children(try expect(root, .sequence, "ContentInfo"), "ContentInfo")
        guard info.count == 2, try ASN1ObjectIdentifier(berEncoded: info[0]) == signedDataOID else {
            throw ReceiptError(.notPKCS7, "ContentInfo is not SignedData (1.2.840.113549.1.7.2)")
        }
        let signedData = try children(try expect(try explicit(info[1], "ContentInfo.content"), .sequence, "SignedData"), "SignedData")
        guard signedData.count >= 4 else { throw ReceiptError(.notPKCS7, "SignedData has \(signedData.count) parts, not at least 4") }
        // version, digestAlgorithms, encapContentInfo, [0] certificates?, [1] crls?, signerInfos
        try version(signedData[0], "SignedData", allowed: 1...5)
        let digestAlgorithms = try children(try expect(signedData[1], .set, "SignedData.digestAlgorithms"), "digestAlgorithms").map {
            try algorithm($0, "a digest algorithm")
        }
        let encapsulated = try children(try expect(signedData[2], .sequence, "encapContentInfo"), "encapContentInfo")
        guard encapsulated.count == 2, try ASN1ObjectIdentifier(berEncoded: encapsulated[0]) == dataOID else {
            throw ReceiptError(.notPKCS7, "encapContentInfo holds no data content (a detached signature?)")
        }
        let content = try octets(try expect(try explicit(encapsulated[1], "eContent"), .octetString, "eContent"), "eContent")
        var certificates: [Certificate] = []
        var certificateDER: [[UInt8]] = []
        var signerInfos: ASN1Node?
        for node in signedData.dropFirst(3) {
            if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                for certificate in try children(node, "certificates") {
                    do {
                        let der = Array(certificate.encodedBytes)
                        certificates.append(try parsedCertificates.certificate(der))
                        certificateDER.append(der)
                    } catch {
                        throw ReceiptError(.notPKCS7, "a certificate of the receipt does not parse: \(Self.plain(error))")
                    }
                }
            } else if node.identifier == .set {
                signerInfos = node
            }
        }
        guard let signerInfos else { throw ReceiptError(.notPKCS7, "SignedData has no signerInfos") }
        let signers = try children(signerInfos, "signerInfos")
        guard signers.count == 1 else { throw ReceiptError(.unsupportedSignature, "\(signers.count) signers: a receipt has one") }
        let signer = try self.signer(try expect(signers[0], .sequence, "SignerInfo"))
        guard digestAlgorithms.contains(signer.digestAlgorithm) else {
            throw ReceiptError(.notPKCS7, "the signer's digest algorithm \(signer.digestAlgorithm) is not among SignedData's digestAlgorithms")
        }
        let receipt = try payload(content)
        return ParsedReceipt(receipt: receipt, content: content, certificates: certificates, certificateDER: certificateDER, signer: signer)
    }

    private static func signer(_ node: ASN1Node) throws -> ParsedReceipt.Signer {
        let parts = try children(node, "SignerInfo")
        guard parts.count >= 5 else { throw ReceiptError(.notPKCS7, "SignerInfo has \(parts.count) parts, not at least 5") }
        // Version 1: the signer named by issuer and serial number (what receipts do).
        try version(parts[0], "SignerInfo", allowed: 1...1)
        let sid = try children(try expect(parts[1], .sequence, "SignerInfo.sid (IssuerAndSerialNumber)"), "SignerInfo.sid (IssuerAndSerialNumber)")
        guard sid.count == 2 else { throw ReceiptError(.unsupportedSignature, "the signer is not named by issuer and serial number") }
        let issuer = try DistinguishedName(derEncoded: sid[0])
        guard sid[1].identifier == .integer, case .primitive(let serial) = sid[1].content else {
            throw ReceiptError(.notPKCS7, "the signer's serial number is not an INTEGER")
        }
        let digest = try algorithm(parts[2], "digestAlgorithm")
        var index = 3
        var signedAttributes: [UInt8]?
        var messageDigest: [UInt8]?
        if parts[3].identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
            // Signed over the attributes' DER with the SET tag (RFC 5652 §5.4), not the [0] that carries them.
            var der = Array(parts[3].encodedBytes)
            der[0] = 0x31
            signedAttributes = der
            for attribute in try children(parts[3], "signedAttrs") {
                let fields = try children(attribute, "a signed attribute")
                guard fields.count == 2, try ASN1ObjectIdentifier(berEncoded: fields[0]) == messageDigestOID else { continue }
                messageDigest = try children(fields[1], "messageDigest").first.map { try octets($0, "messageDigest") }
            }
            index = 4
        }
        guard parts.count > index + 1 else { throw ReceiptError(.notPKCS7, "SignerInfo has no signature") }
        let signatureAlgorithm = try algorithm(parts[index], "signatureAlgorithm")
        let signature = try octets(try expect(parts[index + 1], .octetString, "the signature"), "signature")
        return ParsedReceipt.Signer(
            issuer: issuer, serialNumber: Certificate.SerialNumber(bytes: serial), digestAlgorithm: digest,
            signatureAlgorithm: signatureAlgorithm, signature: signature, signedAttributes: signedAttributes, messageDigest: messageDigest)
    }

    // MARK: - The payload

    private static func payload(_ content: [UInt8]) throws -> AppReceipt {
        let set: ASN1Node
        do {
            set = try BER.parse(content)
        } catch {
            throw ReceiptError(.malformedPayload, "the signed content is not ASN.1: \(Self.plain(error))")
        }
        guard set.identifier == .set else { throw ReceiptError(.malformedPayload, "the signed content is not a SET of receipt attributes") }
        var receipt = AppReceipt(bundleId: "")
        var sawBundle = false
        for (type, value) in try attributes(set, "the receipt") {
            switch type {
            case 0: receipt.receiptType = try string(value, "field 0 (receipt type)")
            case 2:
                receipt.bundleId = try string(value, "field 2 (bundle ID)")
                sawBundle = true
            case 3: receipt.applicationVersion = try string(value, "field 3 (application version)")
            case 12: receipt.creationDate = try date(value, "field 12 (creation date)")
            case 17: receipt.inAppPurchases.append(try inApp(value, index: receipt.inAppPurchases.count))
            case 19: receipt.originalApplicationVersion = try string(value, "field 19 (original application version)")
            case 21: receipt.expirationDate = try date(value, "field 21 (expiration date)")
            default: break
            }
        }
        guard sawBundle else { throw ReceiptError(.malformedPayload, "the receipt has no bundle ID (field 2)") }
        return receipt
    }

    private static func inApp(_ value: [UInt8], index: Int) throws -> InAppPurchase {
        let where_ = "in-app entry \(index + 1)"
        let set: ASN1Node
        do {
            set = try BER.parse(value)
        } catch {
            throw ReceiptError(.malformedPayload, "\(where_) is not ASN.1: \(Self.plain(error))")
        }
        var purchase = InAppPurchase()
        for (type, field) in try attributes(set, where_) {
            let name = "\(where_), field \(type)"
            switch type {
            case 1701: purchase.quantity = Int(exactly: try integer(field, name))
            case 1702: purchase.productId = try string(field, name)
            case 1703: purchase.transactionId = try string(field, name)
            case 1704: purchase.purchaseDate = try date(field, name)
            case 1705: purchase.originalTransactionId = try string(field, name)
            case 1706: purchase.originalPurchaseDate = try date(field, name)
            case 1708: purchase.expiresDate = try date(field, name)
            case 1711: purchase.webOrderLineItemId = try integer(field, name)
            case 1712: purchase.cancellationDate = try date(field, name)
            case 1719: purchase.isInIntroOfferPeriod = try integer(field, name) != 0
            default: break
            }
        }
        return purchase
    }

    /// A SET of `SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
    private static func attributes(_ set: ASN1Node, _ where_: String) throws -> [(Int64, [UInt8])] {
        guard set.identifier == .set, case .constructed(let items) = set.content else {
            throw ReceiptError(.malformedPayload, "\(where_) is not a SET of attributes")
        }
        var found: [(Int64, [UInt8])] = []
        for item in items {
            guard case .constructed(let fields) = item.content else {
                throw ReceiptError(.malformedPayload, "an attribute of \(where_) is not a SEQUENCE")
            }
            let parts = Array(fields)
            guard parts.count == 3, case .primitive(let type) = parts[0].content, parts[0].identifier == .integer else {
                throw ReceiptError(.malformedPayload, "an attribute of \(where_) is not (type, version, value)")
            }
            guard let number = signedInteger(type) else { throw ReceiptError(.malformedPayload, "an attribute type of \(where_) is too large") }
            found.append((number, try octets(parts[2], "field \(number) of \(where_)")))
        }
        return found
    }

    private static func string(_ value: [UInt8], _ name: String) throws -> String {
        guard !value.isEmpty else { return "" }
        let node: ASN1Node
        do {
            node = try BER.parse(value)
        } catch {
            throw ReceiptError(.malformedPayload, "\(name) is not ASN.1")
        }
        guard node.identifier == .utf8String || node.identifier == .ia5String, case .primitive(let bytes) = node.content,
            let text = String(validating: bytes, as: UTF8.self)
        else {
            throw ReceiptError(.malformedPayload, "\(name) is not a UTF8String or IA5String")
        }
        return text
    }

    private static func integer(_ value: [UInt8], _ name: String) throws -> Int64 {
        guard let node = try? BER.parse(value), node.identifier == .integer, case .primitive(let bytes) = node.content,
            let number = signedInteger(bytes)
        else {
            throw ReceiptError(.malformedPayload, "\(name) is not an INTEGER")
        }
        return number
    }

    /// An RFC 3339 date (`2023-10-19T01:45:36Z`, fractions allowed); an empty string (Apple's "none") is `nil`.
    private static func date(_ value: [UInt8], _ name: String) throws -> Date? {
        let text = try string(value, name)
        guard !text.isEmpty else { return nil }
        if let date = utcDate(Array(text.utf8)) { return date }
        if let date = try? Date(text, strategy: .iso8601) { return date }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
        throw ReceiptError(.malformedPayload, "\(name) is not an RFC 3339 date")
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`, the form receipts write, read by hand (a receipt of a few hundred purchases has
    /// a thousand dates; Foundation's parser took most of its time); `nil` for any other form.
    static func utcDate(_ text: [UInt8]) -> Date? {
        guard text.count == 20, text[4] == UInt8(ascii: "-"), text[7] == UInt8(ascii: "-"), text[10] == UInt8(ascii: "T"),
            text[13] == UInt8(ascii: ":"), text[16] == UInt8(ascii: ":"), text[19] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let digit = Int(text[index]) - 48
                guard (0...9).contains(digit) else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), (1...12).contains(month), (1...31).contains(day), hour < 24,
            minute < 60, second < 61
        else { return nil }
        // Days from 1970-01-01 to the civil date (Howard Hinnant's days_from_civil).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }

    private static func signedInteger(_ bytes: ArraySlice<UInt8>) -> Int64? {
        guard !bytes.isEmpty, bytes.count <= 8 else { return nil }
        var value: Int64 = (bytes.first! & 0x80) != 0 ? -1 : 0
        for byte in bytes { value = (value << 8) | Int64(byte) }
        return value
    }

    // MARK: - ASN.1 helpers

    private static func children(_ node: ASN1Node, _ name: String) throws -> [ASN1Node] {
        guard case .constructed(let items) = node.content else { throw ReceiptError(.notPKCS7, "\(name) is not constructed") }
        return Array(items)
    }

    /// `node` when it has `identifier` (a SEQUENCE where a SEQUENCE belongs, not a SET with the same contents).
    private static func expect(_ node: ASN1Node, _ identifier: ASN1Identifier, _ name: String) throws -> ASN1Node {
        guard node.identifier == identifier else { throw ReceiptError(.notPKCS7, "\(name) is tagged \(node.identifier), not \(identifier)") }
        return node
    }

    /// A version INTEGER within `allowed`.
    private static func version(_ node: ASN1Node, _ name: String, allowed: ClosedRange<Int64>) throws {
        guard node.identifier == .integer, case .primitive(let bytes) = node.content, let value = signedInteger(bytes), allowed.contains(value) else {
            throw ReceiptError(.notPKCS7, "\(name)'s version is not an INTEGER in \(allowed.lowerBound)...\(allowed.upperBound)")
        }
    }

    private static func explicit(_ node: ASN1Node, _ name: String) throws -> ASN1Node {
        guard node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific), let inner = try children(node, name).first else {
            throw ReceiptError(.notPKCS7, "\(name) is not [0] EXPLICIT")
        }
        return inner
    }

    /// An OCTET STRING's bytes: primitive (DER), or constructed of OCTET STRINGs (BER, as Xcode writes them).
    private static func octets(_ node: ASN1Node, _ name: String) throws -> [UInt8] {
        switch node.content {
        case .primitive(let bytes): return Array(bytes)
        case .constructed(let parts): return try parts.flatMap { try octets($0, name) }
        }
    }

    /// An AlgorithmIdentifier: a SEQUENCE of the OID and no parameters or NULL (as every receipt's algorithms have).
    private static func algorithm(_ node: ASN1Node, _ name: String) throws -> ASN1ObjectIdentifier {
        let parts = try children(try expect(node, .sequence, name), name)
        guard let first = parts.first else { throw ReceiptError(.notPKCS7, "\(name) is empty") }
        guard parts.count == 1 || (parts.count == 2 && parts[1].identifier == .null && parts[1].encodedBytes.count == 2) else {
            throw ReceiptError(.notPKCS7, "\(name) has parameters other than NULL")
        }
        return try ASN1ObjectIdentifier(berEncoded: first)
    }
}
