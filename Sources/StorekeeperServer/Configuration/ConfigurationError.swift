import Foundation

/// A configuration problem, named.
package struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    package var message: String
    /// The setting at fault, as its path (`jobs.leaseSeconds`), when there is one: ``ServerConfiguration/load(path:)``
    /// adds where it is in the file.
    package var setting: String?

    package init(_ message: String, setting: String? = nil) {
        self.message = Self.hidingSecrets(message)
        self.setting = setting
    }

    /// Several mistakes said in one error, in the order found, the first's setting its own.
    static func combining(_ errors: [ConfigurationError]) -> ConfigurationError {
        ConfigurationError(errors.map(\.message).joined(separator: "; "), setting: errors.first?.setting)
    }

    /// `text` with the password of each URL's `user:password@` in it replaced by `***`: in a word that starts with a
    /// scheme and a slash (`postgres://user:password@host`, `ftp:/user:password@host`). A customer ID or a path that
    /// holds `:` and `@` (`bob:smith@corp`, `/srv/u:v@w/ledger.sqlite`) is left as it is.
    static func hidingPasswords(_ text: String) -> String {
        var characters = Array(text)
        let separators: Set<Character> = [" ", "\t", "\n", "\r", "'", "\""]
        func startsWithScheme(_ word: ArraySlice<Character>) -> Bool {
            guard let first = word.first, first.isASCII, first.isLetter, let colon = word.firstIndex(of: ":") else { return false }
            let scheme = word[word.startIndex..<colon]
            return scheme.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }
                && word.dropFirst(scheme.count + 1).first == "/"
        }
        var index = 0
        while index < characters.count {
            defer { index += 1 }
            guard characters[index] == "@" else { continue }
            var word = index
            while word > 0, !separators.contains(characters[word - 1]) { word -= 1 }
            guard startsWithScheme(characters[word..<index]) else { continue }
            var start = index
            while start > word, !":/@".contains(characters[start - 1]) { start -= 1 }
            guard start > word, start < index, characters[start - 1] == ":" else { continue }
            characters.replaceSubrange(start..<index, with: "***")
            index = start + 3
        }
        return String(characters)
    }

    /// `text` with every webhook secret (`whsec_…`) and API key (`sk_…`) in it replaced by a note of its length, and a
    /// key's PEM text by a note: a
    /// secret pasted into the wrong field (a URL, a name) is quoted by the error naming that field, and errors reach
    /// logs.
    /// `shortest`: the fewest characters after a prefix that make a secret.
    package static func hidingSecrets(_ text: String, shortest: Int = 8) -> String {
        var text = text
        // A key's PEM text pasted where a path or a URL belongs (quoted by the error naming that field): from its
        // `-----BEGIN` to the end of the quoted value.
        // With its `-----END …-----` line, only the key goes: what the message says after it stays.
        while let begin = text.range(of: "-----BEGIN") {
            var end = text[begin.upperBound...].firstIndex { $0 == "'" || $0 == "\"" } ?? text.endIndex
            if let last = text.range(of: "-----END", range: begin.upperBound..<text.endIndex),
                let close = text.range(of: "-----", range: last.upperBound..<text.endIndex)
            {
                end = close.upperBound
            }
            text.replaceSubrange(begin.lowerBound..<end, with: "(a key's text, not shown)")
        }
        if text.contains("@") { text = hidingPasswords(text) }
        guard text.contains("whsec_") || text.contains("sk_") else { return text }
        let characters = Array(text)
        func isSecretCharacter(_ character: Character) -> Bool {
            character.isASCII && (character.isLetter || character.isNumber || "+/=_-".contains(character))
        }
        var out = ""
        var index = 0
        while index < characters.count {
            // A prefix at the start of a word (`task_runner` holds no API key).
            let atWord = index == 0 || !(characters[index - 1].isLetter || characters[index - 1].isNumber)
            let prefix = ["whsec_", "sk_"].first { prefix in
                atWord && characters.count - index >= prefix.count && String(characters[index..<index + prefix.count]) == prefix
            }
            if let prefix {
                var end = index + prefix.count
                while end < characters.count, isSecretCharacter(characters[end]) { end += 1 }
                if end - index - prefix.count >= shortest {
                    out += "\(prefix)… (\(end - index) characters, not shown)"
                    index = end
                    continue
                }
            }
            out.append(characters[index])
            index += 1
        }
        return out
    }

    package var description: String { "configuration: \(message)" }

    /// A number as the file would write it: `2`, not `2.0`.
    static func number(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
    }
}
