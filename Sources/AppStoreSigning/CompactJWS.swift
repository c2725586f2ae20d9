/// A JWS in compact serialization, split and base64url-decoded but not yet trusted.
struct CompactJWS {
    /// The largest input accepted, checked before anything is parsed: 1 MiB.
    static let maximumInputLength = 1 << 20

    /// The text as received.
    let text: String
    /// The decoded protected header (JSON bytes).
    let headerBytes: [UInt8]
    /// The decoded payload (JSON bytes).
    let payloadBytes: [UInt8]
    /// The decoded signature: 64 bytes, raw `r||s`.
    let signature: [UInt8]
    /// The length in UTF-8 bytes of the signing input `header.payload` at the start of ``text``.
    let signingInputLength: Int

    init(parsing text: String) throws(VerificationError) {
        let length = text.utf8.count
        guard length <= Self.maximumInputLength else {
            throw VerificationError(
                .inputTooLarge,
                "input is \(length) bytes; signed App Store data is at most \(Self.maximumInputLength) bytes (1 MiB)"
            )
        }
        let segments = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else {
            throw VerificationError(
                .malformedJWS,
                "expected 3 dot-separated segments (header.payload.signature), found \(segments.count)"
            )
        }
        for (segment, name) in zip(segments, ["header", "payload", "signature"]) where segment.isEmpty {
            throw VerificationError(.malformedJWS, "the \(name) segment is empty")
        }
        self.text = text
        self.headerBytes = try Self.decode(segments[0], name: "header")
        self.payloadBytes = try Self.decode(segments[1], name: "payload")
        self.signature = try Self.decode(segments[2], name: "signature")
        self.signingInputLength = segments[0].count + 1 + segments[1].count
        guard signature.count == 64 else {
            let looksDER = signature.first == 0x30 && signature.count >= 8 && signature.count <= 72
            throw VerificationError(
                .malformedSignature,
                "signature is \(signature.count) bytes; ES256 needs the raw 64-byte r||s form"
                    + (looksDER ? " (this looks DER-encoded, which JWS does not allow)" : "")
            )
        }
    }

    private static func decode(_ segment: Substring.UTF8View, name: String) throws(VerificationError) -> [UInt8] {
        do {
            return try Base64URL.decode(segment)
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
