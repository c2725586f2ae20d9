/// JSON parsed strictly (RFC 8259: no trailing comma, no comment, no key given twice in one object) with the line and
/// column of every value and key, so that each mistake can be named where it is: a configuration file's, and a request
/// body's. Foundation's parser accepts trailing commas and repeated keys (the first of two wins, a difference between
/// parsers an attacker looks for), and says neither where a syntax error is nor which value had the wrong type.
struct StrictJSON: Sendable {
    /// A place in the file: line and column, both from 1 (columns count characters).
    struct Position: Hashable, Sendable, CustomStringConvertible {
        var line: Int
        var column: Int
        var description: String { "line \(line), column \(column)" }
    }

    /// One value and where it starts.
    struct Node: Sendable {
        indirect enum Value: Sendable {
            case null
            case bool(Bool)
            /// The number as written, so that an integer is decoded exactly and `1.5` is refused where one is wanted.
            case number(String)
            case string(String)
            case array([Node])
            /// Members in file order; keys are unique (a repeated key is refused when parsing).
            case object([Member])
        }

        var value: Value
        var position: Position

        /// What the value is, in words, for "expected …, found …".
        var kind: String {
            switch value {
            case .null: return "null"
            case .bool(let value): return "\(value)"
            case .number(let text): return "the number \(text)"
            case .string(let text) where text.hasPrefix("whsec_"): return "a string of \(text.count) characters"
            case .string(let text): return "the string \"\(text.count > 40 ? text.prefix(40) + "…" : Substring(text))\""
            case .array: return "a list"
            case .object: return "an object"
            }
        }

        /// ``kind``, a string's text left out (and any value that starts as a webhook secret does).
        var kindWithoutText: String {
            if case .string(let text) = value { return "a string of \(text.count) characters" }
            return kind
        }
    }

    /// A key and its value.
    struct Member: Sendable {
        var key: String
        var keyPosition: Position
        var value: Node
    }

    /// A syntax error, where it is.
    struct SyntaxError: Error, Sendable {
        var message: String
        var position: Position
    }

    /// The document's root value.
    let root: Node

    /// Parses `bytes` (UTF-8; a leading byte-order mark is skipped). Nesting deeper than 64 is refused.
    init(bytes: [UInt8]) throws(SyntaxError) {
        var parser = Parser(bytes: bytes)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { parser.index = 3 }
        parser.skipWhitespace()
        guard parser.index < bytes.count else { throw parser.error("it is empty (an object was expected)") }
        root = try parser.value(depth: 0)
        parser.skipWhitespace()
        if parser.index < bytes.count {
            if let comment = parser.comment() { throw comment }
            throw parser.error("unexpected \(parser.describeCurrent()) after the end of the JSON value")
        }
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0
        var line = 1
        var column = 1

        init(bytes: [UInt8]) { self.bytes = bytes }

        var position: Position { Position(line: line, column: column) }

        func error(_ message: String, at position: Position? = nil) -> SyntaxError {
            SyntaxError(message: message, position: position ?? self.position)
        }

        /// The byte at the cursor, in words.
        func describeCurrent() -> String {
            guard index < bytes.count else { return "end of file" }
            let byte = bytes[index]
            if byte >= 0x21 && byte < 0x7F { return "'\(Character(UnicodeScalar(byte)))'" }
            return "byte 0x\(String(byte, radix: 16, uppercase: true))"
        }

        mutating func advance() {
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "\n") {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                // A continuation byte of a multi-byte character does not start a column.
                column += 1
            }
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): advance()
                case UInt8(ascii: "/") where index + 1 < bytes.count && [UInt8(ascii: "/"), UInt8(ascii: "*")].contains(bytes[index + 1]):
                    return  // Reported by the caller as an unexpected '/': JSON has no comments.
                default: return
                }
            }
        }

        /// A comment where a separator was expected: JSON has none, and saying so beats "unexpected '/'".
        func comment() -> SyntaxError? {
            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "/"), [UInt8(ascii: "/"), UInt8(ascii: "*")].contains(bytes[index + 1]) else {
                return nil
            }
            return error("a comment: JSON has none (remove it)")
        }

        mutating func expect(_ literal: String) throws(SyntaxError) {
            let start = position
            for byte in literal.utf8 {
                guard index < bytes.count, bytes[index] == byte else {
                    throw error("unexpected \(describeCurrent()): expected '\(literal)'", at: start)
                }
                advance()
            }
        }

        mutating func value(depth: Int) throws(SyntaxError) -> Node {
            guard depth < 64 else { throw error("values nested more than 64 deep") }
            let start = position
            guard index < bytes.count else { throw error("unexpected end of file: a value is missing") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return Node(value: .object(try object(depth: depth)), position: start)
            case UInt8(ascii: "["): return Node(value: .array(try array(depth: depth)), position: start)
            case UInt8(ascii: "\""): return Node(value: .string(try string()), position: start)
            case UInt8(ascii: "t"):
                try expect("true")
                return Node(value: .bool(true), position: start)
            case UInt8(ascii: "f"):
                try expect("false")
                return Node(value: .bool(false), position: start)
            case UInt8(ascii: "n"):
                try expect("null")
                return Node(value: .null, position: start)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return Node(value: .number(try number()), position: start)
            case UInt8(ascii: "/"):
                throw error("a comment: JSON has none (remove it)")
            case UInt8(ascii: "'"):
                throw error("a string in single quotes: JSON strings take double quotes")
            default:
                throw error("unexpected \(describeCurrent()): expected a value (an object, a list, a string, a number, true, false or null)")
            }
        }

        mutating func object(depth: Int) throws(SyntaxError) -> [Member] {
            advance()  // {
            var members: [Member] = []
            var seen: [String: Position] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                advance()
                return members
            }
            while true {
                skipWhitespace()
                let keyPosition = position
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    if index < bytes.count, bytes[index] == UInt8(ascii: "}"), !members.isEmpty {
                        throw error("a comma before '}': JSON allows no trailing comma")
                    }
                    throw comment() ?? error("unexpected \(describeCurrent()): expected a key in double quotes")
                }
                let key = try string()
                if let first = seen[key] {
                    throw error("the key \"\(key)\" is given twice in one object (first at \(first)): only one would be used", at: keyPosition)
                }
                seen[key] = keyPosition
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                    throw error("unexpected \(describeCurrent()): expected ':' after the key \"\(key)\"")
                }
                advance()
                skipWhitespace()
                members.append(Member(key: key, keyPosition: keyPosition, value: try value(depth: depth + 1)))
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of file: the object is not closed with '}'") }
                if bytes[index] == UInt8(ascii: ",") {
                    advance()
                    continue
                }
                if bytes[index] == UInt8(ascii: "}") {
                    advance()
                    return members
                }
                throw comment() ?? error("unexpected \(describeCurrent()): expected ',' or '}' after the value of \"\(key)\" (a missing comma?)")
            }
        }

        mutating func array(depth: Int) throws(SyntaxError) -> [Node] {
            advance()  // [
            var elements: [Node] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                advance()
                return elements
            }
            while true {
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]"), !elements.isEmpty {
                    throw error("a comma before ']': JSON allows no trailing comma")
                }
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of file: the list is not closed with ']'") }
                if bytes[index] == UInt8(ascii: ",") {
                    advance()
                    continue
                }
                if bytes[index] == UInt8(ascii: "]") {
                    advance()
                    return elements
                }
                throw comment() ?? error("unexpected \(describeCurrent()): expected ',' or ']' in a list (a missing comma?)")
            }
        }

        mutating func string() throws(SyntaxError) -> String {
            let start = position
            advance()  // "
            var utf8: [UInt8] = []
            while true {
                guard index < bytes.count else { throw error("unexpected end of file: a string is not closed with '\"'", at: start) }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    advance()
                    guard let text = String(validating: utf8, as: UTF8.self) else {
                        throw error("a string that is not valid UTF-8", at: start)
                    }
                    return text
                case UInt8(ascii: "\\"):
                    advance()
                    guard index < bytes.count else { continue }
                    let escape = bytes[index]
                    advance()
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
                    case UInt8(ascii: "b"): utf8.append(0x08)
                    case UInt8(ascii: "f"): utf8.append(0x0C)
                    case UInt8(ascii: "n"): utf8.append(0x0A)
                    case UInt8(ascii: "r"): utf8.append(0x0D)
                    case UInt8(ascii: "t"): utf8.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800..<0xDC00).contains(scalar) {
                            // A high surrogate must be followed by an escaped low one.
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                                throw error("an unpaired surrogate escape in a string")
                            }
                            advance()
                            advance()
                            let low = try hex4()
                            guard (0xDC00..<0xE000).contains(low) else { throw error("an unpaired surrogate escape in a string") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw error("an unpaired surrogate escape in a string") }
                        utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default:
                        throw error("an unknown escape '\\\(Character(UnicodeScalar(escape)))' in a string (write a backslash as \\\\)")
                    }
                case 0..<0x20:
                    throw error(
                        byte == 0x0A ? "a line break inside a string (the string is not closed with '\"'?)" : "a control character inside a string")
                default:
                    utf8.append(byte)
                    advance()
                }
            }
        }

        mutating func hex4() throws(SyntaxError) -> UInt32 {
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard index < bytes.count, let digit = UInt32(String(UnicodeScalar(bytes[index])), radix: 16) else {
                    throw error("a \\u escape needs four hexadecimal digits")
                }
                value = value << 4 | digit
                advance()
            }
            return value
        }

        mutating func number() throws(SyntaxError) -> String {
            let startIndex = index
            func digits(_ parser: inout Parser) -> Int {
                var count = 0
                while parser.index < parser.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(parser.bytes[parser.index]) {
                    parser.advance()
                    count += 1
                }
                return count
            }
            if bytes[index] == UInt8(ascii: "-") { advance() }
            let leadingZero = index < bytes.count && bytes[index] == UInt8(ascii: "0")
            let integerDigits = digits(&self)
            guard integerDigits > 0 else { throw error("a number needs digits after '-'") }
            if leadingZero && integerDigits > 1 { throw error("a number with a leading zero") }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                advance()
                guard digits(&self) > 0 else { throw error("a number needs digits after '.'") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                advance()
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { advance() }
                guard digits(&self) > 0 else { throw error("a number needs digits in its exponent") }
            }
            return String(decoding: bytes[startIndex..<index], as: UTF8.self)
        }
    }
}
