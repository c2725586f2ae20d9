/// Strict base64 decoding and unpadded base64url encoding, fast enough for the verifier's hot path.
///
/// base64url decoding (RFC 4648 §5, as JWS compact serialization requires, RFC 7515 §2) rejects padding,
/// white space, characters outside the alphabet, a length that leaves one lone character, and non-zero bits left
/// over in the last character, so each byte string has exactly one accepted encoding. Standard base64 decoding
/// (for `x5c` certificates) requires canonical padding instead.
package enum Base64URL {
    private static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static let urlTable = decodeTable(urlAlphabet)
    static let standardTable = decodeTable(standardAlphabet)

    private static func decodeTable(_ alphabet: [UInt8]) -> [UInt8] {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }

    /// Why a string is not base64url.
    package struct DecodingFailure: Error, Hashable {
        package var reason: String
    }

    /// Encodes bytes as unpadded base64url.
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.underestimatedCount * 4 / 3 + 4)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(urlAlphabet[Int((buffer >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 {
            output.append(urlAlphabet[Int((buffer << UInt32(6 - bits)) & 0x3F)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes unpadded base64url strictly.
    package static func decode(_ text: Substring.UTF8View) throws(DecodingFailure) -> [UInt8] {
        var text = Substring(text)
        return try text.withUTF8 { buffer in
            Result { () throws(DecodingFailure) in
                try decode(UnsafeRawBufferPointer(buffer), table: urlTable, padded: false)
            }
        }.get()
    }

    /// Decodes unpadded base64url bytes strictly.
    package static func decode(_ bytes: UnsafeRawBufferPointer) throws(DecodingFailure) -> [UInt8] {
        try decode(bytes, table: urlTable, padded: false)
    }

    /// Decodes standard, canonically padded base64 strictly.
    static func decodeStandard(_ text: String) throws(DecodingFailure) -> [UInt8] {
        var text = text
        return try text.withUTF8 { buffer in
            Result { () throws(DecodingFailure) in
                try decode(UnsafeRawBufferPointer(buffer), table: standardTable, padded: true)
            }
        }.get()
    }

    /// Decodes `input` with `table`. Unpadded input may end with 2 or 3 characters; padded input must be a multiple
    /// of 4 with one or two `=` at the end only.
    static func decode(_ input: UnsafeRawBufferPointer, table: [UInt8], padded: Bool) throws(DecodingFailure) -> [UInt8] {
        var count = input.count
        if padded {
            guard count % 4 == 0 else {
                throw DecodingFailure(reason: "length \(count) is not a multiple of 4")
            }
            if count > 0 && input[count - 1] == UInt8(ascii: "=") { count -= 1 }
            if count > 0 && input[count - 1] == UInt8(ascii: "=") { count -= 1 }
        }
        if count % 4 == 1 {
            throw DecodingFailure(reason: "length \(count) leaves a lone character (truncated?)")
        }
        let fullGroups = count / 4
        let tail = count % 4
        let outputCount = fullGroups * 3 + (tail == 0 ? 0 : tail - 1)
        var failure: DecodingFailure? = nil
        let output = table.withUnsafeBufferPointer { table in
            [UInt8](unsafeUninitializedCapacity: outputCount) { out, initialized in
                var inIndex = 0
                var outIndex = 0
                func invalid(_ offset: Int) -> DecodingFailure {
                    let character = input[offset]
                    let shown =
                        character == UInt8(ascii: "=")
                        ? "padding '='" : "byte 0x\(String(character, radix: 16))"
                    return DecodingFailure(reason: "\(shown) at offset \(offset) is not in the base64 alphabet")
                }
                for _ in 0..<fullGroups {
                    let a = table[Int(input[inIndex])]
                    let b = table[Int(input[inIndex + 1])]
                    let c = table[Int(input[inIndex + 2])]
                    let d = table[Int(input[inIndex + 3])]
                    if (a | b | c | d) & 0xC0 != 0 {
                        let bad = [a, b, c, d].firstIndex { $0 == 0xFF } ?? 0
                        failure = invalid(inIndex + bad)
                        return
                    }
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[outIndex] = UInt8(truncatingIfNeeded: group >> 16)
                    out[outIndex + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    out[outIndex + 2] = UInt8(truncatingIfNeeded: group)
                    inIndex += 4
                    outIndex += 3
                }
                if tail > 0 {
                    var group: UInt32 = 0
                    for offset in 0..<tail {
                        let value = table[Int(input[inIndex + offset])]
                        if value == 0xFF {
                            failure = invalid(inIndex + offset)
                            return
                        }
                        group = group << 6 | UInt32(value)
                    }
                    // 2 characters carry 12 bits (1 byte + 4 spare), 3 carry 18 (2 bytes + 2 spare).
                    let spare = tail == 2 ? 4 : 2
                    if group & ((1 << UInt32(spare)) - 1) != 0 {
                        failure = DecodingFailure(reason: "non-zero trailing bits in the last character")
                        return
                    }
                    group >>= UInt32(spare)
                    if tail == 3 {
                        out[outIndex] = UInt8(truncatingIfNeeded: group >> 8)
                        out[outIndex + 1] = UInt8(truncatingIfNeeded: group)
                    } else {
                        out[outIndex] = UInt8(truncatingIfNeeded: group)
                    }
                    outIndex += tail - 1
                }
                initialized = outIndex
            }
        }
        if let failure { throw failure }
        return output
    }
}
