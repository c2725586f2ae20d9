public import Foundation

/// A UUID that Apple sends as a lowercase string (`appAccountToken`, `deviceVerificationNonce`).
///
/// Foundation's `UUID` encodes itself in upper case; this type encodes the lowercase form Apple uses, so a payload
/// decodes and re-encodes to the same JSON. A string that is not a UUID fails to decode.
public struct LowercaseUUID: Codable, Hashable, Sendable, CustomStringConvertible {
    /// The UUID.
    public var uuid: UUID

    public init(_ uuid: UUID) { self.uuid = uuid }

    /// Parses a UUID string in either case; `nil` if it is not a UUID.
    public init?(uuidString: String) {
        guard let uuid = UUID(uuidString: uuidString) else { return nil }
        self.uuid = uuid
    }

    /// The lowercase string form, as Apple writes it.
    public var description: String { uuid.uuidString.lowercased() }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let string = try container.decode(String.self)
        guard let uuid = UUID(uuidString: string) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(string)' is not a UUID")
        }
        self.uuid = uuid
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
