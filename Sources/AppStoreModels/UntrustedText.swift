/// Text that came from outside (an unverified payload, a request path, a certificate that has not been checked yet),
/// made safe to put in a log line, an error message or an audit record: it can neither start a line of its own nor
/// be longer than a bound.
///
/// Control characters (C0, DEL, C1), line and paragraph separators, the bidirectional formatting characters that
/// can make a line display differently from what it holds, and invisible characters (format characters and every
/// default-ignorable code point: zero widths, U+2060-U+2064, fillers, variation selectors, tags) are written as `\u{…}` escapes (`\n`, `\r` and `\t` by
/// their usual names), and a backslash as `\\`, so the escaped text reads back unambiguously. Anything longer than
/// the limit (in UTF-8 bytes of the escaped text) is cut at a character boundary and marked with how much was left
/// out.
package enum UntrustedText {
    /// The most bytes of a value shown by default (UTF-8 of the escaped text).
    package static let defaultLimit = 128

    /// `text` escaped and cut so that the escaped text is at most `limit` UTF-8 bytes, followed, when something was
    /// cut, by a mark saying how many bytes of the input were left out.
    package static func escaped(_ text: some StringProtocol, limit: Int = defaultLimit) -> String {
        var out = ""
        let scalars = text.unicodeScalars
        var index = scalars.startIndex
        while index != scalars.endIndex {
            let piece = escape(scalars[index], escapingBackslash: true)
            guard out.utf8.count + piece.utf8.count <= limit else {
                var rest = String.UnicodeScalarView()
                rest.append(contentsOf: scalars[index...])
                return out + "…(\(String(rest).utf8.count) more bytes)"
            }
            out += piece
            index = scalars.index(after: index)
        }
        return out
    }

    /// `'text'` escaped and cut, or `missing` for `nil`: how messages quote a value.
    package static func quoted(_ text: String?, limit: Int = defaultLimit) -> String {
        text.map { "'\(escaped($0, limit: limit))'" } ?? "missing"
    }

    /// A whole message built from trusted words and possibly untrusted values: only the characters that could forge a
    /// line or hide text are escaped (backslashes are kept, so a message needs no un-escaping to read), and it is cut
    /// to at most `limit` UTF-8 bytes (and a `…`).
    package static func sanitizedMessage(_ text: String, limit: Int = 2_048) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) || text.utf8.count > limit else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            let piece = escape(scalar, escapingBackslash: false)
            guard out.utf8.count + piece.utf8.count <= limit else { return out + "…" }
            out += piece
        }
        return out
    }

    /// Whether a scalar must not appear raw in a log line.
    package static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        // ASCII first (nearly every byte of a log line): only its controls.
        if scalar.value < 0x80 { return scalar.value < 0x20 || scalar.value == 0x7F }
        // Format characters and those Unicode says to draw as nothing (fillers, variation selectors, tags…).
        if scalar.properties.generalCategory == .format || scalar.properties.isDefaultIgnorableCodePoint { return true }
        return switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true  // C0 controls (line feed, carriage return, escape…), DEL, C1 controls
        case 0x2028, 0x2029: true  // line and paragraph separators
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true  // bidirectional formatting
        // Invisible ones, which make two different values read the same: zero widths, the word joiner and invisible
        // operators (U+2063 joins an offer signature's fields), the byte order mark, soft hyphen, interlinear
        // annotations.
        case 0x00AD, 0x200B...0x200D, 0x2060...0x2064, 0xFEFF, 0xFFF9...0xFFFB: true
        default: false
        }
    }

    private static func escape(_ scalar: Unicode.Scalar, escapingBackslash: Bool) -> String {
        switch scalar {
        case "\n": "\\n"
        case "\r": "\\r"
        case "\t": "\\t"
        case "\\" where escapingBackslash: "\\\\"
        case _ where needsEscape(scalar): "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
        default: String(scalar)
        }
    }
}
