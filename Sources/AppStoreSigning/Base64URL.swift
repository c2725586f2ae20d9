/// Strict unpadded base64url (RFC 4648 §5), as JWS compact serialization requires (RFC 7515 §2).
///
/// Decoding rejects padding, whitespace, characters outside the alphabet, a length that leaves one lone character,
/// and non-zero bits left over in the last character, so each byte string has exactly one accepted encoding.
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    /// Why a string is not base64url.
    struct DecodingFailure: Error, Hashable {
        var reason: String
    }

    /// Encodes bytes without padding.
    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.underestimatedCount * 4 / 3 + 4)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(alphabet[Int((buffer >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 {
            output.append(alphabet[Int((buffer << UInt32(6 - bits)) & 0x3F)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes an unpadded base64url string strictly.
    static func decode(_ text: Substring.UTF8View) throws(DecodingFailure) -> [UInt8] {
        let count = text.count
        if count % 4 == 1 {
            throw DecodingFailure(reason: "length \(count) leaves a lone character (truncated?)")
        }
        var output: [UInt8] = []
        output.reserveCapacity(count * 3 / 4)
        var buffer: UInt32 = 0
        var bits = 0
        var position = 0
        try decodeTable.withUnsafeBufferPointer { table throws(DecodingFailure) in
            for character in text {
                let value = table[Int(character)]
                if value == 0xFF {
                    let shown = character == UInt8(ascii: "=") ? "padding '='" : "byte 0x\(String(character, radix: 16))"
                    throw DecodingFailure(reason: "\(shown) at offset \(position) is not in the base64url alphabet")
                }
                buffer = (buffer << 6) | UInt32(value)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    output.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
                }
                position += 1
            }
        }
        if bits > 0 && buffer & ((1 << UInt32(bits)) - 1) != 0 {
            throw DecodingFailure(reason: "non-zero trailing bits in the last character")
        }
        return output
    }
}
