import Foundation

/// Decodes a `Decodable` from ``StrictJSON`` (a configuration file, a request body), strictly: a key that no type asked for is
/// refused (with the nearest key that type knows: "did you mean `productEntitlements`?"), and every error names the
/// file, the line and column, the setting's path (`apps[0].appAppleId`) and, for a wrong type, what was expected and
/// what was found. Types keep their ordinary `init(from:)`: the keys a type asks for (`decode`, `decodeIfPresent`,
/// `contains`) are the keys it knows, so no list of keys is written twice.
struct StrictJSONDecoder {
    /// Where an error is in the file, and what it is.
    struct Failure: Error {
        var message: String
        var position: StrictJSON.Position?
        /// The object whose known keys the message lists (an unknown key's): listed once, not for each of its unknown keys.
        var listsKnownOf: String? = nil
        /// Where decoding failed, as keys (``components(_:)``): the objects on the way were not read to their end, so
        /// their keys not asked for yet are not unknown ones. `nil`: not known.
        var failedAt: [String]? = nil
    }

    /// Decodes `type` from `bytes`, the contents of `file` (named in errors: a path, or "the body"). Throws
    /// ``ConfigurationError``, whose message names where the mistake is.
    static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], file: String) throws(ConfigurationError) -> T {
        let document: StrictJSON
        do {
            document = try StrictJSON(bytes: bytes)
        } catch {
            throw ConfigurationError("\(file):\(error.position.line):\(error.position.column): not valid JSON: \(error.message)")
        }
        return try decode(type, from: document, file: file)
    }

    /// How many unknown keys one error names.
    static let unknownKeysShown = 5

    /// The most bytes of a decoding error an API answer repeats: room for ``unknownKeysShown`` unknown keys, each with
    /// its line, column and nearest known key.
    static let answerLimit = 700

    static func decode<T: Decodable>(_ type: T.Type, from document: StrictJSON, file: String) throws(ConfigurationError) -> T {
        let usage = Usage()
        func located(_ failure: Failure) -> ConfigurationError {
            ConfigurationError(failure.position.map { "\(file):\($0.line):\($0.column): \(failure.message)" } ?? "\(file): \(failure.message)")
        }
        // Unknown keys found (up to one more than are shown), each located, separated by `; `.
        func listed(_ unknown: [Failure]) -> String {
            var message = unknown.prefix(Self.unknownKeysShown).map { located($0).message }.joined(separator: "; ")
            if unknown.count > Self.unknownKeysShown { message += "; and more unknown keys" }
            return message
        }
        let value: T
        // A mistake in a value is named with the unknown keys of the objects read before it (not those of the objects
        // it stopped in, nor of the objects after it: nothing asked for their keys): a typo elsewhere is not left for
        // the next attempt to reveal.
        func withUnknownKeys(_ failure: Failure) -> ConfigurationError {
            guard let failedAt = failure.failedAt else { return located(failure) }
            var unknown: [Failure] = []
            usage.unknownKeys(in: document.root, into: &unknown, limit: Self.unknownKeysShown + 1, readingStoppedAt: failedAt)
            guard !unknown.isEmpty else { return located(failure) }
            return ConfigurationError(located(failure).message + "; and " + listed(unknown))
        }
        do {
            value = try NodeDecoder(node: document.root, codingPath: [], usage: usage).decodeValue(T.self)
        } catch let failure as Failure {
            throw withUnknownKeys(failure)
        } catch let error as DecodingError {
            // Thrown by a type's own `init(from:)` (a raw value it does not know, say).
            throw withUnknownKeys(Self.failure(error, in: document.root))
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError("\(file): \(error)")
        }
        // Every unknown key at once (a few: a body may hold thousands), so that fixing one typo does not just reveal the next.
        var unknown: [Failure] = []
        usage.unknownKeys(in: document.root, into: &unknown, limit: Self.unknownKeysShown + 1)
        if !unknown.isEmpty { throw ConfigurationError(listed(unknown)) }
        return value
    }

    /// A setting's path as the Configuration article writes it: `apps[0].serverAPI.Production.keyId`; a key that is not a plain
    /// name is quoted (`productEntitlements["pro.monthly"]`).
    /// Whether a value at `codingPath` may be a secret (a key, a secret, a password, a token): its text is never
    /// repeated in an error (a rotated webhook secret written as a string instead of a list was, up to 40 characters).
    static func secretive(_ codingPath: [any CodingKey]) -> Bool {
        codingPath.contains { key in
            let name = key.stringValue.lowercased()
            return ["secret", "key", "password", "token", "credential"].contains { name.contains($0) }
        }
    }

    static func path(_ codingPath: [any CodingKey]) -> String {
        var text = ""
        for key in codingPath {
            if let index = key.intValue {
                text += "[\(index)]"
            } else if !key.stringValue.isEmpty, key.stringValue.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) {
                text += text.isEmpty ? key.stringValue : "." + key.stringValue
            } else {
                text += "[\"\(key.stringValue)\"]"
            }
        }
        return text.isEmpty ? "the top level" : text
    }

    /// The node a setting's path names (`apps[0].bundleId`, `entitlements.subscriptionLevels["pro.monthly"]`), or nil when
    /// the file does not hold it.
    static func node(atPath path: String, in root: StrictJSON.Node) -> StrictJSON.Node? {
        var keys: [AnyKey] = []
        var rest = Substring(path)
        while !rest.isEmpty {
            if rest.hasPrefix("[\"") {
                guard let end = rest.range(of: "\"]") else { return nil }
                keys.append(AnyKey(String(rest[rest.index(rest.startIndex, offsetBy: 2)..<end.lowerBound])))
                rest = rest[end.upperBound...]
            } else if rest.hasPrefix("[") {
                guard let end = rest.firstIndex(of: "]"), let index = Int(rest[rest.index(after: rest.startIndex)..<end]) else { return nil }
                keys.append(AnyKey(index))
                rest = rest[rest.index(after: end)...]
            } else {
                if rest.hasPrefix(".") { rest = rest.dropFirst() }
                let name = rest.prefix { $0 != "." && $0 != "[" }
                keys.append(AnyKey(String(name)))
                rest = rest.dropFirst(name.count)
            }
        }
        return walk(keys, in: root).complete
    }

    /// The node at `codingPath`, or the deepest one on the way.
    static func node(at codingPath: [any CodingKey], in root: StrictJSON.Node) -> StrictJSON.Node {
        walk(codingPath, in: root).deepest
    }

    /// Follows `codingPath` from `root`: the node it names (nil when the document does not hold it), and the deepest
    /// node reached on the way.
    static func walk(_ codingPath: [any CodingKey], in root: StrictJSON.Node) -> (complete: StrictJSON.Node?, deepest: StrictJSON.Node) {
        var node = root
        for key in codingPath {
            switch node.value {
            case .object(let members):
                guard let member = members.first(where: { $0.key == key.stringValue }) else { return (nil, node) }
                node = member.value
            case .array(let elements):
                guard let index = key.intValue, elements.indices.contains(index) else { return (nil, node) }
                node = elements[index]
            default:
                return (nil, node)
            }
        }
        return (node, node)
    }

    static func failure(_ error: DecodingError, in root: StrictJSON.Node) -> Failure {
        let context: DecodingError.Context
        switch error {
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .keyNotFound(_, let c), .dataCorrupted(let c): context = c
        @unknown default: return Failure(message: "\(error)", position: nil)
        }
        let node = node(at: context.codingPath, in: root)
        return Failure(
            message: "\(path(context.codingPath)): \(context.debugDescription)", position: node.position, failedAt: components(context.codingPath))
    }

    /// A path's keys, an index as `[n]` (so that `["0"]`, a key, differs from `[0]`, an index).
    static func components(_ codingPath: [any CodingKey]) -> [String] {
        codingPath.map { key in key.intValue.map { "[\($0)]" } ?? key.stringValue }
    }

    /// The keys each object was asked for, by its path.
    final class Usage {
        var asked: [String: Set<String>] = [:]

        func ask(_ key: String, at codingPath: [any CodingKey]) {
            asked[StrictJSONDecoder.path(codingPath), default: []].insert(key)
        }

        /// The keys, in file order, that the objects holding them were never asked for, up to `limit` in all. An
        /// object no type read at all is not looked into: its own key was reported as unknown, or it is a value a type
        /// took whole. `readingStoppedAt`: where decoding failed (``Failure/failedAt``), whose objects on the way
        /// report no unknown key (the rest of their keys were not asked for yet).
        func unknownKeys(
            in node: StrictJSON.Node, codingPath: [any CodingKey] = [], into found: inout [Failure], limit: Int, readingStoppedAt: [String]? = nil
        ) {
            guard found.count < limit else { return }
            switch node.value {
            case .object(let members):
                guard let known = asked[StrictJSONDecoder.path(codingPath)] else { return }
                let unfinished = readingStoppedAt.map { $0.starts(with: StrictJSONDecoder.components(codingPath)) } ?? false
                for member in members where found.count < limit {
                    let memberPath = codingPath + [AnyKey(member.key)]
                    if unfinished, !known.contains(member.key) { continue }
                    guard known.contains(member.key) else {
                        let here = StrictJSONDecoder.path(codingPath)
                        var failure = Failure(message: "unknown key \"\(member.key)\" in \(here)", position: member.keyPosition)
                        if let nearest = DidYouMean.nearest(to: member.key, among: known) {
                            failure.message += ": did you mean \"\(nearest)\"?"
                        } else if !found.contains(where: { $0.listsKnownOf == here }) {
                            failure.message += " (known here: \(known.sorted().joined(separator: ", ")))"
                            failure.listsKnownOf = here
                        }
                        found.append(failure)
                        continue
                    }
                    unknownKeys(in: member.value, codingPath: memberPath, into: &found, limit: limit, readingStoppedAt: readingStoppedAt)
                }
            case .array(let elements):
                for (index, element) in elements.enumerated() where found.count < limit {
                    unknownKeys(
                        in: element, codingPath: codingPath + [AnyKey(index)], into: &found, limit: limit, readingStoppedAt: readingStoppedAt)
                }
            default:
                return
            }
        }

    }

    /// A key of any name or index.
    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int?
        init(_ string: String) { stringValue = string }
        init(_ index: Int) {
            stringValue = "\(index)"
            intValue = index
        }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { self.init(intValue) }
    }
}

/// One node's decoder.
private struct NodeDecoder: Decoder {
    let node: StrictJSON.Node
    let codingPath: [any CodingKey]
    let usage: StrictJSONDecoder.Usage
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func failure(_ message: String) -> StrictJSONDecoder.Failure {
        StrictJSONDecoder.Failure(
            message: "\(StrictJSONDecoder.path(codingPath)): \(message)", position: node.position, failedAt: StrictJSONDecoder.components(codingPath))
    }

    func mismatch(_ expected: String) -> StrictJSONDecoder.Failure {
        failure("expected \(expected), found \(StrictJSONDecoder.secretive(codingPath) ? node.kindWithoutText : node.kind)")
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = node.value else { throw mismatch("an object") }
        // Asked for nothing yet, but known to have been read (an empty object type refuses every key).
        if usage.asked[StrictJSONDecoder.path(codingPath)] == nil { usage.asked[StrictJSONDecoder.path(codingPath)] = [] }
        return KeyedDecodingContainer(ObjectContainer<Key>(decoder: self, members: members))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = node.value else { throw mismatch("a list") }
        return ListContainer(decoder: self, elements: elements)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { ValueContainer(decoder: self) }

    func child(_ node: StrictJSON.Node, _ key: any CodingKey) -> NodeDecoder {
        NodeDecoder(node: node, codingPath: codingPath + [key], usage: usage)
    }

    /// Numbers, strings and booleans here (each type's own `init(from:)` would come back to this container and
    /// loop); anything else through its `init(from:)`.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        switch type {
        case is Bool.Type:
            guard case .bool(let value) = node.value else { throw mismatch("true or false") }
            return value as! T
        case is String.Type:
            guard case .string(let value) = node.value else { throw mismatch("a string") }
            return value as! T
        case is Double.Type:
            return try number(Double.self, "a number") as! T
        case is Float.Type:
            return Float(try number(Double.self, "a number")) as! T
        case is Int.Type: return try integer(Int.self) as! T
        case is Int64.Type: return try integer(Int64.self) as! T
        case is Int32.Type: return try integer(Int32.self) as! T
        case is Int16.Type: return try integer(Int16.self) as! T
        case is Int8.Type: return try integer(Int8.self) as! T
        case is UInt.Type: return try integer(UInt.self) as! T
        case is UInt64.Type: return try integer(UInt64.self) as! T
        case is UInt32.Type: return try integer(UInt32.self) as! T
        case is UInt16.Type: return try integer(UInt16.self) as! T
        case is UInt8.Type: return try integer(UInt8.self) as! T
        default: return try T(from: self)
        }
    }

    func number(_: Double.Type, _ expected: String) throws -> Double {
        guard case .number(let text) = node.value, let value = Double(text), value.isFinite else { throw mismatch(expected) }
        return value
    }

    func integer<I: FixedWidthInteger>(_: I.Type) throws -> I {
        guard case .number(let text) = node.value else { throw mismatch("a whole number") }
        guard let value = I(text) else {
            if text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) { throw mismatch("a whole number") }
            throw failure("\(text) is out of range (\(I.min) to \(I.max))")
        }
        return value
    }
}

private struct ObjectContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: NodeDecoder
    let members: [StrictJSON.Member]
    var codingPath: [any CodingKey] { decoder.codingPath }

    var allKeys: [Key] {
        for member in members { decoder.usage.ask(member.key, at: codingPath) }
        return members.compactMap { Key(stringValue: $0.key) }
    }

    func member(_ key: Key) -> StrictJSON.Member? {
        decoder.usage.ask(key.stringValue, at: codingPath)
        return members.first { $0.key == key.stringValue }
    }

    func required(_ key: Key) throws -> StrictJSON.Node {
        guard let member = member(key) else {
            // A key given instead, mistyped, is named: "did you mean …?".
            let given = members.map(\.key).filter { $0 != key.stringValue }
            let instead = DidYouMean.nearest(to: key.stringValue, among: given)
            let hint = instead.map { #": "\#($0)" is given instead; did you mean "\#(key.stringValue)"?"# } ?? ""
            throw StrictJSONDecoder.Failure(
                message: "\(StrictJSONDecoder.path(codingPath)): the required key \"\(key.stringValue)\" is missing\(hint)",
                position: instead.flatMap { name in members.first { $0.key == name }?.keyPosition } ?? decoder.node.position,
                failedAt: StrictJSONDecoder.components(codingPath)
            )
        }
        return member.value
    }

    func contains(_ key: Key) -> Bool { member(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        guard case .null = try required(key).value else { return false }
        return true
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decoder.child(try required(key), key).decodeValue(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try decoder.child(try required(key), key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try decoder.child(try required(key), key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder { decoder.child(try required(key), key) }
}

private struct ListContainer: UnkeyedDecodingContainer {
    let decoder: NodeDecoder
    let elements: [StrictJSON.Node]
    var currentIndex = 0
    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    mutating func next() throws -> NodeDecoder {
        guard !isAtEnd else { throw decoder.failure("the list has too few elements") }
        defer { currentIndex += 1 }
        return decoder.child(elements[currentIndex], StrictJSONDecoder.AnyKey(currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, case .null = elements[currentIndex].value else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next() }
}

private struct ValueContainer: SingleValueDecodingContainer {
    let decoder: NodeDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool {
        guard case .null = decoder.node.value else { return false }
        return true
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type) }
}
