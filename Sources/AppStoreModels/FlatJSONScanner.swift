import Foundation

/// Reads one JSON object of scalar members, byte by byte, for the hand-written decoders of the payloads a ledger reads
/// back most (``TransactionInfo/init(json:fallback:)``, ``RenewalInfo/init(json:fallback:)``) and of the webhook's
/// body (``NotificationRequestBody/init(json:)``).
///
/// It accepts a strict subset of JSON and says ``Unsupported`` for everything else (an escaped string, a nested
/// object or array, a number that is not a plain integer where an integer is read, a duplicated member, trailing
/// bytes, malformed JSON): the caller then decodes the same bytes with Foundation's `JSONDecoder`, so what the fast
/// path returns is always what `JSONDecoder` would have, and every error is `JSONDecoder`'s.
struct FlatJSONScanner {
    /// The input is outside the subset this scanner reads; decode it with `JSONDecoder` instead.
    struct Unsupported: Error {}

    private let bytes: UnsafeRawBufferPointer
    private var index = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    private static let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\"), comma = UInt8(ascii: ","), colon = UInt8(ascii: ":")

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func consume(_ byte: UInt8) -> Bool {
        skipSpace()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// Calls `member` with each member's key (its raw bytes, valid only during the call) and the scanner positioned at
    /// its value, which `member` must read or ``skipScalar()``; then checks that nothing but whitespace follows.
    mutating func readObject(_ member: (UnsafeRawBufferPointer, inout FlatJSONScanner) throws -> Void) throws {
        guard consume(UInt8(ascii: "{")) else { throw Unsupported() }
        if !consume(UInt8(ascii: "}")) {
            repeat {
                skipSpace()
                let key = try rawString()
                // Keys are ASCII, as Apple's are: a key beyond ASCII might equal a known one as a Swift `String`
                // (canonical equivalence, which JSONDecoder's look-up follows) without being equal byte for byte.
                guard key.allSatisfy({ $0 < 0x80 }) else { throw Unsupported() }
                guard consume(Self.colon) else { throw Unsupported() }
                skipSpace()
                try member(key, &self)
            } while consume(Self.comma)
            guard consume(UInt8(ascii: "}")) else { throw Unsupported() }
        }
        skipSpace()
        guard index == bytes.count else { throw Unsupported() }
    }

    /// The bytes of a string without escapes or control characters (not yet checked as UTF-8).
    private mutating func rawString() throws -> UnsafeRawBufferPointer {
        guard index < bytes.count, bytes[index] == Self.quote else { throw Unsupported() }
        let start = index + 1
        var end = start
        while end < bytes.count {
            let byte = bytes[end]
            if byte == Self.quote { break }
            guard byte >= 0x20, byte != Self.backslash else { throw Unsupported() }
            end += 1
        }
        guard end < bytes.count else { throw Unsupported() }
        index = end + 1
        return UnsafeRawBufferPointer(rebasing: bytes[start..<end])
    }

    /// Whether the value here is `null` (consumed if so).
    mutating func null() -> Bool {
        guard bytes.count - index >= 4, bytes[index] == UInt8(ascii: "n"), bytes[index + 1] == UInt8(ascii: "u"),
            bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
        else { return false }
        index += 4
        return true
    }

    mutating func string() throws -> String {
        guard let string = String(validating: try rawString(), as: UTF8.self) else { throw Unsupported() }
        return string
    }

    mutating func bool() throws -> Bool {
        if bytes.count - index >= 4, bytes[index] == UInt8(ascii: "t"), bytes[index + 1] == UInt8(ascii: "r"),
            bytes[index + 2] == UInt8(ascii: "u"), bytes[index + 3] == UInt8(ascii: "e")
        {
            index += 4
            return true
        }
        if bytes.count - index >= 5, bytes[index] == UInt8(ascii: "f"), bytes[index + 1] == UInt8(ascii: "a"),
            bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "s"), bytes[index + 4] == UInt8(ascii: "e")
        {
            index += 5
            return false
        }
        throw Unsupported()
    }

    /// A number written as a plain JSON integer (`-?(0|[1-9][0-9]*)`, no fraction or exponent) that fits 64 bits.
    mutating func int64() throws -> Int64 {
        let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let start = index
        var value: Int64 = 0
        while index < bytes.count, case let digit = bytes[index], digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") {
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.subtractingReportingOverflow(Int64(digit - UInt8(ascii: "0")))
            guard !overflow1, !overflow2 else { throw Unsupported() }
            value = sum  // accumulated negative, so that Int64.min fits
            index += 1
        }
        let digits = index - start
        guard digits > 0, !(digits > 1 && bytes[start] == UInt8(ascii: "0")) else { throw Unsupported() }
        if index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): throw Unsupported()
            default: break
            }
        }
        if negative { return value }
        guard value != .min else { throw Unsupported() }
        return -value
    }

    mutating func int() throws -> Int {
        guard let value = Int(exactly: try int64()) else { throw Unsupported() }
        return value
    }

    /// Skips a string, a number, `true`, `false` or `null`, checking that it is well-formed JSON; anything else (an
    /// object, an array, a string with escapes) is ``Unsupported``.
    mutating func skipScalar() throws {
        guard index < bytes.count else { throw Unsupported() }
        switch bytes[index] {
        case Self.quote:
            _ = try string()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            _ = try bool()
        case UInt8(ascii: "n"):
            guard null() else { throw Unsupported() }
        default:
            try skipNumber()
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    private mutating func skipNumber() throws {
        func digits(_ scanner: inout FlatJSONScanner) -> Int {
            let start = scanner.index
            while scanner.index < scanner.bytes.count, scanner.bytes[scanner.index] >= UInt8(ascii: "0"),
                scanner.bytes[scanner.index] <= UInt8(ascii: "9")
            {
                scanner.index += 1
            }
            return scanner.index - start
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let start = index
        let integer = digits(&self)
        guard integer > 0, !(integer > 1 && bytes[start] == UInt8(ascii: "0")) else { throw Unsupported() }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw Unsupported() }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw Unsupported() }
        }
    }
}

/// The members a hand-written decoder knows, by key: a key's position in `keys`, found without making a `String`.
struct FlatJSONKeys: Sendable {
    private let keys: [[UInt8]]

    init(_ keys: [String]) {
        precondition(keys.count <= 64, "FlatJSONScanner.readMembers tracks at most 64 members")
        self.keys = keys.map { Array($0.utf8) }
    }

    /// The position of `key` in the list, `nil` for a key not in it.
    func position(of key: UnsafeRawBufferPointer) -> Int? {
        for (position, candidate) in keys.enumerated() where candidate.count == key.count {
            let equal = candidate.withUnsafeBytes { candidate in
                candidate.count == 0 || memcmp(candidate.baseAddress!, key.baseAddress!, candidate.count) == 0
            }
            if equal { return position }
        }
        return nil
    }
}

extension FlatJSONScanner {
    /// `flat`'s value for `json`, or `fallback`'s when `flat` gives up: always what `fallback` would decode. `flat`
    /// reads dates as epoch milliseconds and keys as they are, so a `fallback` set otherwise decodes everything itself.
    static func decode<Value: Decodable>(_ json: Data, fallback: JSONDecoder, flat: (UnsafeRawBufferPointer) throws -> Value) throws -> Value {
        if case .millisecondsSince1970 = fallback.dateDecodingStrategy, case .useDefaultKeys = fallback.keyDecodingStrategy,
            let value = try? json.withUnsafeBytes(flat)
        {
            return value
        }
        return try fallback.decode(Value.self, from: json)
    }

    /// Reads the object in `bytes` whose members are `keys` (up to 64; the first `required` must be there and not
    /// null): `member` reads the value of each member present and not null, by its position in `keys`; members not in
    /// `keys` are skipped; a repeated member is ``Unsupported`` (JSONDecoder's rule for those is its own).
    static func readMembers(
        of bytes: UnsafeRawBufferPointer, _ keys: FlatJSONKeys, required: Int, _ member: (Int, inout FlatJSONScanner) throws -> Void
    ) throws {
        var seen: UInt64 = 0
        var scanner = FlatJSONScanner(bytes)
        try scanner.readObject { key, value in
            guard let position = keys.position(of: key) else { return try value.skipScalar() }
            let bit: UInt64 = 1 << UInt64(position)
            guard seen & bit == 0 else { throw Unsupported() }
            seen |= bit
            if value.null() {
                guard position >= required else { throw Unsupported() }
                return
            }
            try member(position, &value)
        }
        let requiredBits: UInt64 = required == 0 ? 0 : (1 << UInt64(required)) - 1
        guard seen & requiredBits == requiredBits else { throw Unsupported() }
    }
}

extension FlatJSONScanner {
    /// Epoch milliseconds written as an integer, as `JSONDecoder`'s `.millisecondsSince1970` reads them.
    mutating func date() throws -> Date {
        Date(timeIntervalSince1970: Double(try int64()) / 1000)
    }

    mutating func wire<Value: OpenStringWireValue>() throws -> Value {
        Value(rawValue: try string())
    }

    mutating func wire<Value: OpenIntegerWireValue>() throws -> Value {
        Value(rawValue: try int())
    }

    mutating func uuid() throws -> LowercaseUUID {
        guard let uuid = LowercaseUUID(uuidString: try string()) else { throw Unsupported() }
        return uuid
    }
}
