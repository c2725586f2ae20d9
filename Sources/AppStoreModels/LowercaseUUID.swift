public import Foundation

/// A UUID that Apple sends as a lowercase string (`appAccountToken`, `deviceVerificationNonce`).
///
/// Foundation's `UUID` encodes itself in upper case; this type encodes the lowercase form Apple uses, so a payload
/// decodes and re-encodes to the same JSON. A string that is not a UUID fails to decode.
public struct LowercaseUUID: Codable, Hashable, Sendable, CustomStringConvertible {
    /// The UUID.
    public var uuid: UUID

    public init(_ uuid: UUID) { self.uuid = uuid }

    /// Parses a UUID string in either case (`8-4-4-4-12` hexadecimal digits); `nil` if it is not a UUID.
    public init?(uuidString: String) {
        guard let uuid = Self.parse(uuidString) else { return nil }
        self.uuid = uuid
    }

    /// The lowercase string form, as Apple writes it.
    public var description: String {
        // Written digit by digit: Foundation's `uuidString` then `lowercased()` make two strings on the way.
        String(unsafeUninitializedCapacity: 36) { out in
            withUnsafeBytes(of: uuid.uuid) { bytes in
                var position = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        out[position] = 0x2D
                        position += 1
                    }
                    out[position] = Self.hexDigits[Int(byte >> 4)]
                    out[position + 1] = Self.hexDigits[Int(byte & 0x0F)]
                    position += 2
                }
            }
            return 36
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// `8-4-4-4-12` hexadecimal digits of either case, nothing else (no braces, spaces or signs). Foundation's
    /// parser on Linux goes through `sscanf` (about 3 µs a token in the outbox's reads).
    static func parse(_ text: String) -> UUID? {
        var text = text
        return text.withUTF8 { bytes -> UUID? in
            guard bytes.count == 36 else { return nil }
            var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let parsed = withUnsafeMutableBytes(of: &raw) { out -> Bool in
                var position = 0
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        guard bytes[position] == 0x2D else { return false }
                        position += 1
                    }
                    guard let high = hexValue(bytes[position]), let low = hexValue(bytes[position + 1]) else { return false }
                    out[index] = high << 4 | low
                    position += 2
                }
                return true
            }
            return parsed ? UUID(uuid: raw) : nil
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let string = try container.decode(String.self)
        guard let uuid = Self.parse(string) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "\(UntrustedText.quoted(string, limit: 64)) is not a UUID")
        }
        self.uuid = uuid
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
