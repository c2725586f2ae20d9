/// A value that Apple sends on the wire from a set it keeps extending.
///
/// Types conforming to this protocol are structs over a raw value with static members for the values known
/// today (like swift-http-types' `HTTPRequest.Method`). A value that Apple adds later still decodes, keeps its raw
/// value, re-encodes unchanged, and can be logged; ``isKnown`` tells whether this build knows it.
public protocol OpenWireValue: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible
where RawValue: Codable & Hashable & Sendable {
    /// Wraps any raw value, known or not.
    init(rawValue: RawValue)

    /// Every value this build knows, in the order Apple documents them.
    static var knownValues: [Self] { get }
}

extension OpenWireValue {
    /// Whether this value is one that this build of Storekeeper knows.
    public var isKnown: Bool { Self.knownValues.contains(self) }

    /// The raw value, as Apple sent it.
    public var description: String { "\(rawValue)" }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        self.init(rawValue: try container.decode(RawValue.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// An ``OpenWireValue`` whose raw value is a string, writable as a string literal.
public protocol OpenStringWireValue: OpenWireValue, ExpressibleByStringLiteral where RawValue == String {}

extension OpenStringWireValue {
    public init(stringLiteral value: String) { self.init(rawValue: value) }
}

/// An ``OpenWireValue`` whose raw value is an integer, writable as an integer literal.
public protocol OpenIntegerWireValue: OpenWireValue, ExpressibleByIntegerLiteral where RawValue == Int {}

extension OpenIntegerWireValue {
    public init(integerLiteral value: Int) { self.init(rawValue: value) }
}
