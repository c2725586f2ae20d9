import AppStoreModels
import AppStoreSigning
import Foundation
import StorekeeperCore

/// Where the password of a URL that gives none comes from, as libpq looks for it: the `PGPASSWORD` environment
/// variable, else the first line of the password file (`PGPASSFILE`, or `~/.pgpass`) that matches the URL's host,
/// port, database and user. So the password need not be on the command line, where any user of the machine can read
/// it in the process list.
///
/// The file's lines are `host:port:database:user:password`; `*` in any of the first four fields matches anything,
/// `\` escapes a `:` or a `\`, and lines starting with `#` are comments. As libpq, a file that group or others may
/// read or write is not used; unlike libpq, which skips it with a warning, such a file is an error naming it and the
/// fix, so that the password's absence is never a mystery at the server's authentication.
enum PostgresPasswordFile {
    /// The password for `url`, or nil when neither the environment nor the file has one. Throws when the file is
    /// there but must not be used (its mode) or cannot be read; never with the password in the message.
    static func password(for url: PostgresDatabaseURL, environment: [String: String]) throws(StorageError) -> String? {
        if let password = environment["PGPASSWORD"], !password.isEmpty { return password }
        let path: String
        if let given = environment["PGPASSFILE"], !given.isEmpty {
            path = given
        } else if let home = environment["HOME"], !home.isEmpty {
            path = home + "/.pgpass"
        } else {
            return nil
        }
        let shown = UntrustedText.quoted(path, limit: 200)
        let contents: [UInt8]
        switch SecretFile.read(path) {
        case .success(let data): contents = data
        case .failure(.missing): return nil  // No file: no password, as libpq.
        case .failure(let problem): throw StorageError(SecretFile.describe(problem, shown, what: "password file"))
        }
        guard let text = String(validating: contents, as: UTF8.self) else {
            throw StorageError("the password file \(shown) cannot be read as UTF-8 text")
        }
        return password(in: text, host: url.host, port: url.port, database: url.database, username: url.username)
    }

    /// The password of the first line of a password file that matches, or nil.
    static func password(in text: String, host: String, port: Int, database: String, username: String) -> String? {
        let wanted = [host, String(port), database, username]
        for line in text.split(whereSeparator: \.isNewline) {  // "\r\n" is one Character
            guard !line.hasPrefix("#") else { continue }
            let fields = self.fields(line)
            guard fields.count == 5 else { continue }
            guard zip(fields.prefix(4), wanted).allSatisfy({ field, value in field.anything || field.text == value }) else { continue }
            return fields[4].text
        }
        return nil
    }

    /// A line's fields, split at unescaped `:`, escapes removed; `anything` for a field that is an unescaped `*` alone
    /// (`\*` is a literal star). The fifth field, the password, is everything after the fourth separator, `:`
    /// included (libpq's reading).
    private static func fields(_ line: Substring) -> [(text: String, anything: Bool)] {
        var fields: [(text: String, anything: Bool)] = []
        var current = ""
        var wasEscaped = false
        var escaped = false
        for character in line {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
                wasEscaped = true
            } else if character == ":", fields.count < 4 {
                fields.append((current, current == "*" && !wasEscaped))
                current = ""
                wasEscaped = false
            } else {
                current.append(character)
            }
        }
        fields.append((current, false))
        return fields
    }
}
