import Foundation

/// A JWS in compact serialization, split and base64url-decoded, with its signature checked for the ES256 length,
/// but not yet trusted.
///
/// The header's base64url text is kept as received (``headerSegment``) and decoded on demand, so a verifier that
/// has seen the exact same header before need not decode it again.
struct CompactJWS {
    /// The largest input accepted, checked before anything is parsed: 1 MiB.
    static let maximumInputLength = 1 << 20

    /// The text as received.
    let text: String
    /// The protected header's base64url text, exactly as received.
    let headerSegment: [UInt8]
    /// The decoded payload (JSON bytes).
    let payloadBytes: [UInt8]
    /// The decoded signature: 64 bytes, raw `r||s`, when the length was checked.
    let signature: [UInt8]
    /// The length in UTF-8 bytes of the signing input `header.payload` at the start of ``text``.
    let signingInputLength: Int

    /// Splits and decodes `text`; with `checkingSignatureLength`, the signature must be 64 bytes.
    init(parsing text: String, checkingSignatureLength: Bool = true) throws(VerificationError) {
        let length = text.utf8.count
        guard length <= Self.maximumInputLength else {
            throw VerificationError(
                .inputTooLarge,
                "input is \(length) bytes; signed App Store data is at most \(Self.maximumInputLength) bytes (1 MiB)"
            )
        }
        var copy = text
        let parts = try copy.withUTF8 { buffer in
            Result { () throws(VerificationError) -> (header: [UInt8], payload: [UInt8], signature: [UInt8], dot: Int) in
                let bytes = UnsafeRawBufferPointer(buffer)
                let ranges = try Self.segments(of: bytes)
                return (
                    Array(bytes[ranges[0]]),
                    try Self.decode(bytes, ranges[1], name: "payload"),
                    try Self.decode(bytes, ranges[2], name: "signature"),
                    ranges[1].upperBound
                )
            }
        }.get()
        self.text = text
        self.headerSegment = parts.header
        self.payloadBytes = parts.payload
        self.signature = parts.signature
        self.signingInputLength = parts.dot
        if checkingSignatureLength { try checkSignatureLength() }
    }

    /// Fails unless the signature is 64 bytes (ES256's raw `r||s`).
    func checkSignatureLength() throws(VerificationError) {
        guard signature.count != 64 else { return }
        let looksDER = signature.first == 0x30 && signature.count >= 8 && signature.count <= 72
        throw VerificationError(
            .malformedSignature,
            "signature is \(signature.count) bytes; ES256 needs the raw 64-byte r||s form"
                + (looksDER ? " (this looks DER-encoded, which JWS does not allow)" : "")
        )
    }

    /// The decoded protected header (JSON bytes).
    func headerBytes() throws(VerificationError) -> [UInt8] {
        try headerSegment.withUnsafeBytes { bytes in
            Result { () throws(VerificationError) in try Self.decode(bytes, 0..<bytes.count, name: "header") }
        }.get()
    }

    /// The byte ranges of the three non-empty segments.
    private static func segments(of bytes: UnsafeRawBufferPointer) throws(VerificationError) -> [Range<Int>] {
        var dots: [Int] = []
        var start = 0
        while start < bytes.count, let base = bytes.baseAddress,
            let found = memchr(base + start, Int32(UInt8(ascii: ".")), bytes.count - start)
        {
            let offset = UnsafeRawPointer(found) - base
            dots.append(offset)
            start = offset + 1
        }
        guard dots.count == 2 else {
            throw VerificationError(
                .malformedJWS,
                "expected 3 dot-separated segments (header.payload.signature), found \(dots.count + 1)"
            )
        }
        let ranges = [0..<dots[0], (dots[0] + 1)..<dots[1], (dots[1] + 1)..<bytes.count]
        for (range, name) in zip(ranges, ["header", "payload", "signature"]) where range.isEmpty {
            throw VerificationError(.malformedJWS, "the \(name) segment is empty")
        }
        return ranges
    }

    private static func decode(
        _ bytes: UnsafeRawBufferPointer,
        _ range: Range<Int>,
        name: String
    ) throws(VerificationError) -> [UInt8] {
        do {
            return try Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[range]), table: Base64URL.urlTable, padded: false)
        } catch {
            throw VerificationError(.invalidBase64URL, "\(name) segment is not base64url: \(error.reason)")
        }
    }

    /// Calls `body` with the bytes of the signing input (`header.payload`).
    func withSigningInput<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        var copy = text
        return try copy.withUTF8 { utf8 in
            try body(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[0..<signingInputLength]))
        }
    }
}
