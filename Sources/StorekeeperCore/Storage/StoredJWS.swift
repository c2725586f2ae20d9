import AppStoreSigning
package import Foundation

/// A compact JWS as a ledger stores it: the protected header apart (mostly the base64 of a ~3 KB certificate chain,
/// the same in every JWS the App Store signs with that chain, so a backend keeps each distinct header once and
/// refers to it by a number), the payload decoded from base64url, and the raw 64-byte signature.
///
/// Nested JWS inside the payload (a notification's `signedTransactionInfo` and `signedRenewalInfo`) have their
/// headers taken out the same way: each `"<header>.` in the payload's JSON becomes `"` + ``marker`` + the header's
/// reference in decimal + ``marker`` + `.`. The marker byte (0x01) cannot occur in JSON text, so the substitution is
/// unambiguous, and ``jws(header:)`` gives back the original byte for byte (base64url is canonical: each byte string
/// has exactly one unpadded encoding, and the verifier accepts no other). ``init(splitting:reference:)`` checks that
/// round trip and refuses anything it would not reproduce.
package struct StoredJWS: Hashable, Sendable {
    /// The marker around a header reference in ``payload``.
    package static let marker: UInt8 = 0x01

    /// The reference of the outer protected header.
    package var header: Int64
    /// The payload's JSON bytes, with nested headers replaced by their references.
    package var payload: [UInt8]
    /// The signature's bytes (base64url-decoded).
    package var signature: [UInt8]

    /// Whether stored payload bytes refer to headers (hold ``marker``), searched in place: `Data`'s own iterator costs
    /// a call per byte, on every uncached read.
    package static func refersToHeaders(_ payload: Data) -> Bool {
        payload.withUnsafeBytes { $0.contains(marker) }
    }

    package init(header: Int64, payload: [UInt8], signature: [UInt8]) {
        self.header = header
        self.payload = payload
        self.signature = signature
    }

    /// Splits `jws`, asking `reference` for the reference of each distinct header (a backend stores the text once
    /// and answers its row's ID); `nil` when it is not a compact JWS whose parts are canonical base64url, or its
    /// payload already holds the marker byte.
    ///
    /// The parts give `jws` back exactly by construction: the strict decoder accepts only canonical base64url (so
    /// encoding what it decoded gives the same text), and a payload without the marker byte has each marker added
    /// here around a reference to exactly the header text taken out. Debug builds check the round trip anyway, and
    /// the tests check it on every notification of the shipped scenarios and on Apple's real samples.
    package init?(splitting jws: String, reference: (String) throws -> Int64) throws {
        // The two dots found with `memchr`: a generic `split` of the UTF-8 view would be most of this initializer.
        var text = jws
        let parts: (header: String, payload: [UInt8], signature: [UInt8])? = text.withUTF8 { utf8 in
            let bytes = UnsafeRawBufferPointer(utf8)
            guard let base = bytes.baseAddress, let first = memchr(base, Int32(UInt8(ascii: ".")), bytes.count) else { return nil }
            let headerEnd = UnsafeRawPointer(first) - base
            guard let second = memchr(base + headerEnd + 1, Int32(UInt8(ascii: ".")), bytes.count - headerEnd - 1) else { return nil }
            let payloadEnd = UnsafeRawPointer(second) - base
            let signature = UnsafeRawBufferPointer(rebasing: bytes[(payloadEnd + 1)...])
            guard headerEnd > 0, !signature.contains(UInt8(ascii: ".")),
                let payload = try? Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[(headerEnd + 1)..<payloadEnd])),
                let signature = try? Base64URL.decode(signature)
            else { return nil }
            return (String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<headerEnd]), as: UTF8.self), payload, signature)
        }
        guard let parts, !parts.payload.contains(Self.marker) else { return nil }
        let decodedPayload = parts.payload, signature = parts.signature
        #if DEBUG
        var texts: [Int64: String] = [:]
        func referencing(_ text: String) throws -> Int64 {
            let id = try reference(text)
            texts[id] = text
            return id
        }
        let outer = try referencing(parts.header)
        let payload = try Self.extractingNestedHeaders(decodedPayload, reference: referencing)
        #else
        let outer = try reference(parts.header)
        let payload = try Self.extractingNestedHeaders(decodedPayload, reference: reference)
        #endif
        self.init(header: outer, payload: payload, signature: signature)
        #if DEBUG
        assert(self.jws(header: { texts[$0] }) == jws, "a stored JWS would not come back byte for byte")
        #endif
    }

    /// The JWS, given the text of each header reference; `nil` when a reference is unknown.
    package func jws(header text: (Int64) -> String?) -> String? {
        guard let outer = text(header), let payload = originalPayload(header: text) else { return nil }
        return outer + "." + Base64URL.encode(payload) + "." + Base64URL.encode(signature)
    }

    /// The payload's JSON bytes as signed, nested headers restored; `nil` when a reference is unknown.
    package func originalPayload(header text: (Int64) -> String?) -> [UInt8]? {
        guard payload.contains(Self.marker) else { return payload }
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + 4_096)
        var index = 0
        while index < payload.count {
            let byte = payload[index]
            index += 1
            guard byte == Self.marker else {
                out.append(byte)
                continue
            }
            var reference: Int64 = 0
            var digits = 0
            while index < payload.count, payload[index] != Self.marker {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(payload[index]), digits < 18 else { return nil }
                reference = reference * 10 + Int64(payload[index] - UInt8(ascii: "0"))
                digits += 1
                index += 1
            }
            guard index < payload.count, digits > 0, let header = text(reference) else { return nil }
            index += 1
            out.append(contentsOf: header.utf8)
        }
        return out
    }

    /// The shortest header worth taking out of a payload: a JWS header with an `x5c` chain is kilobytes long; a
    /// short string that merely looks like one is left alone.
    static let minimumNestedHeaderLength = 64

    /// Replaces each `"eyJ…` base64url run followed by `.` (a nested JWS's header: base64url of `{"…`) with its
    /// reference between markers; the bytes between are copied in bulk.
    static func extractingNestedHeaders(_ json: [UInt8], reference: (String) throws -> Int64) rethrows -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(json.count)
        var copiedUpTo = 0
        var index = 0
        let quote = UInt8(ascii: "\""), dot = UInt8(ascii: ".")
        while let found = json[index...].firstIndex(of: quote) {
            let start = found + 1
            index = start
            guard start + 3 <= json.count, json[start] == UInt8(ascii: "e"), json[start + 1] == UInt8(ascii: "y"),
                json[start + 2] == UInt8(ascii: "J")
            else { continue }
            var end = start
            while end < json.count, isBase64URL(json[end]) { end += 1 }
            guard end < json.count, json[end] == dot, end - start >= minimumNestedHeaderLength else {
                index = end
                continue
            }
            let id = try reference(String(decoding: json[start..<end], as: UTF8.self))
            out.append(contentsOf: json[copiedUpTo..<start])
            out.append(marker)
            out.append(contentsOf: String(id).utf8)
            out.append(marker)
            copiedUpTo = end
            index = end
        }
        out.append(contentsOf: json[copiedUpTo...])
        return out
    }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "_"): true
        default: false
        }
    }
}
