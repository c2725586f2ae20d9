import Foundation

/// A file that holds a secret (a private key, a password): it must be a plain file that only its owner may read or
/// write, as libpq and ssh require of theirs, so that a key copied with the wrong mode is refused at once rather than
/// left readable by every user of the machine.
package enum SecretFile {
    /// Why a secret file must not be used.
    package enum Problem: Error, Sendable, Equatable {
        /// There is no file there.
        case missing
        /// It is a directory, a device or another kind of thing.
        case notAFile
        /// Group or others may read or write it: its permission bits (e.g. `0o644`).
        case exposed(mode: Int)
        /// It cannot be read by this process.
        case unreadable
    }

    /// The secret file's contents, or why it must not be used. A symbolic link is followed (the target's mode counts).
    package static func read(_ path: String) -> Result<[UInt8], Problem> {
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: target) else { return .failure(.missing) }
        guard attributes[.type] as? FileAttributeType == .typeRegular else { return .failure(.notAFile) }
        let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0o777
        guard mode & 0o077 == 0 else { return .failure(.exposed(mode: mode & 0o777)) }
        guard let data = FileManager.default.contents(atPath: target) else { return .failure(.unreadable) }
        return .success(Array(data))
    }

    /// Whether a "path" is really a key's text (pasted where its path belongs): such a value is never echoed.
    package static func looksLikeKeyText(_ path: String) -> Bool {
        path.contains("-----BEGIN") || path.contains("PRIVATE KEY") || path.contains("\n") || path.utf8.count > 4_096
            // A key's base64 body without its PEM lines: DER (a SEQUENCE, 0x30, so "M…") in the base64 alphabet.
            || (path.utf8.count >= 64 && path.hasPrefix("M") && path.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+/=".contains($0)) })
    }

    /// The problem in words, naming the file as `shown` and what to do about it.
    package static func describe(_ problem: Problem, _ shown: String, what: String) -> String {
        switch problem {
        case .missing: return "the \(what) \(shown) does not exist"
        case .notAFile: return "the \(what) \(shown) is not a plain file"
        case .exposed(let mode):
            return "the \(what) \(shown) may be read or written by group or others (mode \(String(mode, radix: 8))): make it 0600 (chmod 600)"
        case .unreadable: return "the \(what) \(shown) cannot be read by this process (its owner?)"
        }
    }
}
