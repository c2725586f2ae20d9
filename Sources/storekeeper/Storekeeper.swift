import AppStoreModels
import ArgumentParser
import Foundation
import StorekeeperServer

@main
struct Storekeeper: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storekeeper",
        abstract: "A self-hosted App Store purchase server, with a local App Store simulator.",
        subcommands: [
            DemoCommand.self, ServeCommand.self, ConfigCommand.self, RecoverCommand.self, ReconcileCommand.self, ImportCommand.self,
            BackupCommand.self, CopyCommand.self,
            EventsCommand.self, APIKeyCommand.self, SimulatorCommand.self, APICommand.self, VerifyCommand.self, ReceiptCommand.self,
            DecodeCommand.self,
            TokenCommand.self, SignCommand.self,
            BenchCommand.self,
        ]
    )

    /// ArgumentParser's `main`, with two mistakes named that it reports as something else (a mistyped command as an
    /// unknown option after it, a mistyped option as the required one missing), and a command's own failures printed
    /// as `error: …` like the ones the commands print themselves.
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let command: any ParsableCommand
        do {
            command = try await asyncParseAsRoot(arguments)
        } catch {
            if let mistake = CommandLineMistake.find(in: arguments, root: Self.self) {
                try? FileHandle.standardError.write(contentsOf: Data("\(shown("Error: \(mistake.message)"))\n\(mistake.usage)\n".utf8))
                Foundation.exit(ExitCode.validationFailure.rawValue)
            }
            let status = exitCode(for: error)
            // Help and the like: ArgumentParser's, on standard output.
            guard status != .success else { exit(withError: error) }
            let message = negativeNumberHint(fullMessage(for: error), arguments: arguments)
            if !message.isEmpty { try? FileHandle.standardError.write(contentsOf: Data((shown(message) + "\n").utf8)) }
            Foundation.exit(status.rawValue)
        }
        do {
            var command = command
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as ValidationError {
            // A value refused by the command itself: with that command's usage, not the root's.
            let path = CommandLineMistake.path(to: type(of: command), from: Self.self) ?? "storekeeper"
            let usage = helpMessage(for: type(of: command), columns: 10_000).split(separator: "\n").first { $0.hasPrefix("USAGE: ") }
            try? FileHandle.standardError.write(
                contentsOf:
                    Data(
                        "\(shown("Error: \(error.message)"))\nUsage: \(usage.map { String($0.dropFirst(7)) } ?? path)\n  See '\(path) --help' for more information.\n"
                            .utf8))
            Foundation.exit(ExitCode.validationFailure.rawValue)
        } catch let error where String(reflecting: type(of: error)).hasPrefix("ArgumentParser.") {
            // Help, usage, exit codes and validation: ArgumentParser's, printed its way.
            exit(withError: error)
        } catch let error as CLIError {
            reportError("\(error)")
            Foundation.exit(ExitCode.failure(for: error).rawValue)
        } catch {
            reportError("\(error)")
            Foundation.exit(ExitCode.failure.rawValue)
        }
    }
}

/// A parse error's message as it may be printed: what the command line held is quoted in it, and may be a key pasted
/// in the wrong place (`--issuer-id "$(cat AuthKey.p8)"` reads as an unknown option) or hold control characters. Keys'
/// text and secrets are replaced by a note; before the usage, control characters are escaped and the text bounded.
/// ArgumentParser's "Missing value for '--count <count>'" when the value given was a negative number (`--count -1`:
/// read as an option), said as what it is.
func negativeNumberHint(_ message: String, arguments: [String]) -> String {
    guard let range = message.range(of: "Missing value for '"), let end = message[range.upperBound...].firstIndex(of: " ") else { return message }
    let option = String(message[range.upperBound..<end])
    guard let index = arguments.firstIndex(of: option), index + 1 < arguments.count else { return message }
    let value = arguments[index + 1]
    guard value.hasPrefix("-"), Double(value) != nil else { return message }
    let (first, rest) = message.firstIndex(of: "\n").map { (message[..<$0], message[$0...]) } ?? (message[...], "")
    return "\(first): \(value) is a negative number, which \(option) does not take (it reads as an option)\(rest)"
}

/// `message` with keys' text and secrets masked, and each argument quoted in it that holds a control character or is
/// long replaced by its escaped, bounded form; the message's own line breaks (before `Help:` and `Usage:`) stay.
func shown(_ message: String, given arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> String {
    var message = ConfigurationError.hidingSecrets(message)
    for argument in arguments.sorted(by: { $0.utf8.count > $1.utf8.count })
    where !argument.isEmpty && (argument.utf8.count > 256 || UntrustedText.sanitizedMessage(argument) != argument) {
        message = message.replacingOccurrences(of: argument, with: UntrustedText.escaped(argument, limit: 256))
    }
    return message
}

/// Writes `error: <text>` on standard error, as every command reports a failure: values from the command line, the
/// configuration and the ledger are quoted in errors, so keys' text and secrets are masked, control characters
/// escaped and the whole bounded.
func reportError(_ text: String) {
    try? FileHandle.standardError.write(
        contentsOf: Data("error: \(UntrustedText.sanitizedMessage(ConfigurationError.hidingSecrets(text), limit: 4_096))\n".utf8))
}

/// A word of the command line that names no command or option where it stands, with the nearest that does.
struct CommandLineMistake {
    var message: String
    var usage: String

    /// The first such word: a subcommand's name mistyped (`serv`), or an option the command does not have
    /// (`--confg`). `nil` when every word is known (the parser's own error is then the right one).
    static func find(in arguments: [String], root: any ParsableCommand.Type) -> CommandLineMistake? {
        var command: any ParsableCommand.Type = root
        var path = [root._commandName]
        var index = 0
        // The subcommands named first.
        while index < arguments.count, !arguments[index].hasPrefix("-") {
            let word = arguments[index]
            let subcommands: [any ParsableCommand.Type] = command.configuration.subcommands
            if subcommands.isEmpty { break }
            var names: [String] = []
            var next: (any ParsableCommand.Type)?
            for subcommand in subcommands {
                let name = subcommand._commandName
                names.append(name)
                if name == word { next = subcommand }
            }
            guard let next else {
                if word == "help" { return nil }
                let hint = suggestion(for: word, among: names).map { ". Did you mean '\($0)'?" } ?? ""
                let joined = path.joined(separator: " ")
                return CommandLineMistake(
                    message: "Unknown command '\(word)'\(hint)",
                    usage: "Usage: \(joined) <subcommand>\n  See '\(joined) --help' for more information.")
            }
            command = next
            path.append(next._commandName)
            index += 1
        }
        // The options the command's help names (long options are what operators mistype), and its default
        // subcommand's, which run when no subcommand is named (`simulator --dir …`).
        var known: Set<String> = ["--help", "-h"]
        var described: (any ParsableCommand.Type)? = command
        while let current = described {
            known.formUnion(options(in: root.helpMessage(for: current, includeHidden: true, columns: 10_000)))
            described = current.configuration.defaultSubcommand
        }
        for argument in arguments[index...] {
            if argument == "--" { break }
            // A key pasted where its file's path goes (`--private-key "$(cat key.p8)"`) parses as options.
            if argument.hasPrefix("-----BEGIN") {
                return CommandLineMistake(
                    message:
                        "a key's text is on the command line, where a file's path goes: give the .p8 file's path (--private-key FILE), or the text in APPSTORE_PRIVATE_KEY_PEM (a command line is visible to every user of the machine)",
                    usage: "See '\(path.joined(separator: " ")) --help' for its options.")
            }
            // `--name`, or `-x` (one letter: `-` alone is standard input, `-5` a number).
            let isShort = argument.count == 2 && argument.hasPrefix("-") && argument.last?.isLetter == true
            guard argument.hasPrefix("--") || isShort else { continue }
            let option = String(argument.prefix { $0 != "=" })
            if known.contains(option) { continue }
            // A one-letter option has no near neighbour worth naming.
            let hint =
                isShort ? "" : suggestion(for: option, among: known.filter { $0.hasPrefix("--") }.sorted()).map { ". Did you mean '\($0)'?" } ?? ""
            return CommandLineMistake(
                message: "Unknown option '\(option)'\(hint)", usage: "See '\(path.joined(separator: " ")) --help' for its options.")
        }
        return nil
    }

    /// The name nearest to `word` by edit distance, when it is near enough to be a typo of it.
    static func suggestion(for word: String, among names: [String]) -> String? {
        let ranked = names.map { (name: $0, distance: editDistance(word, $0)) }.min { ($0.distance, $0.name) < ($1.distance, $1.name) }
        guard let ranked, ranked.distance <= max(2, word.count / 3) else { return nil }
        return ranked.name
    }

    /// The `--name` and `-x` words of a help text.
    static func options(in help: String) -> Set<String> {
        var names = Set<String>()
        let characters = Array(help)
        var index = 0
        while index + 1 < characters.count {
            let atWord = index == 0 || characters[index - 1] == " " || characters[index - 1] == "(" || characters[index - 1] == "["
            if characters[index] == "-", atWord {
                let long = characters[index + 1] == "-"
                var end = index + (long ? 2 : 1)
                while end < characters.count, characters[end].isLetter || characters[end].isNumber || (long && characters[end] == "-") { end += 1 }
                let length = end - index
                if long ? length > 2 : length == 2 { names.insert(String(characters[index..<end])) }
                index = max(end, index + 1)
            } else {
                index += 1
            }
        }
        return names
    }

    /// `storekeeper events list`: the words that name `command` from `root`.
    static func path(to command: any ParsableCommand.Type, from root: any ParsableCommand.Type) -> String? {
        if command == root { return root._commandName }
        for subcommand in root.configuration.subcommands {
            if let rest = path(to: command, from: subcommand) { return root._commandName + " " + rest }
        }
        return nil
    }

    static func editDistance(_ one: String, _ other: String) -> Int {
        let a = Array(one)
        let b = Array(other)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [Int](repeating: 0, count: b.count + 1)
            current[0] = i
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
            }
            previous = current
        }
        return previous[b.count]
    }
}
