import AppStoreModels
import Foundation

extension ServerConfiguration {
    /// One setting the server runs with: its path (`customerCache.capacity`), its value as JSON, and whether the
    /// file gave it or the default did.
    package struct Setting: Sendable, Hashable, Codable {
        package enum Source: String, Sendable, Hashable, Codable { case file, `default` }
        package var path: String
        package var value: String
        package var source: Source
        /// What the value means when it needs saying (a masked secret, a resolved path, what `null` stands for).
        package var note: String?
    }

    /// Every setting this configuration holds, defaults included, in path order: what `storekeeper config check`
    /// prints. API key hashes are masked; a relative path says what it was resolved to.
    func settings(file document: StrictJSON) -> [Setting] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(self), let effective = try? StrictJSON(bytes: Array(data)) else { return [] }
        var settings: [Setting] = []
        Self.flatten(effective.root, codingPath: [], file: document.root, into: &settings)
        return settings
    }

    /// The settings as lines for a terminal: `path  value  (source)`, aligned.
    func report(file document: StrictJSON) -> String {
        let settings = settings(file: document)
        let width = min(60, settings.map(\.path.count).max() ?? 0)
        return settings.map { setting in
            let padded = setting.path.padding(toLength: max(width, setting.path.count), withPad: " ", startingAt: 0)
            let note = setting.note.map { "  (\($0))" } ?? ""
            return "\(padded)  \(setting.value)  [\(setting.source.rawValue)]\(note)"
        }.joined(separator: "\n")
    }

    private static func flatten(
        _ node: StrictJSON.Node, codingPath: [StrictJSONDecoder.AnyKey], file: StrictJSON.Node, into settings: inout [Setting]
    ) {
        switch node.value {
        case .object(let members) where !members.isEmpty:
            for member in members {
                flatten(member.value, codingPath: codingPath + [.init(member.key)], file: file, into: &settings)
            }
        case .array(let elements) where elements.contains(where: { if case .object = $0.value { true } else { false } }):
            for (index, element) in elements.enumerated() {
                flatten(element, codingPath: codingPath + [.init(index)], file: file, into: &settings)
            }
        default:
            let path = StrictJSONDecoder.path(codingPath)
            let inFile = StrictJSONDecoder.walk(codingPath, in: file).complete
            var value = render(node)
            var note = meaningOfNull(path: path, node: node)
            let noSecrets: Bool = {
                if case .array(let elements) = node.value { return elements.isEmpty }
                return false
            }()
            if !noSecrets, path.hasSuffix(".secret") || path.hasSuffix(".previousSecrets") || path.contains(".previousSecrets[") {
                // One mask per secret: during a rotation the operator sees how many are still accepted.
                if case .array(let elements) = node.value {
                    value = "[" + Array(repeating: "\"whsec_…\"", count: elements.count).joined(separator: ", ") + "]"
                } else {
                    value = "\"whsec_…\""
                }
                note = "masked"
            }
            if path.hasSuffix(".sha256"), case .string(let hash) = node.value {
                value = "\"\(hash.prefix(8))…\""
                note = "masked"
            }
            if let given = inFile, path.hasSuffix("trustedRoots") || path.hasSuffix("privateKeyFile"), render(given) != value {
                note = "\(render(given)) resolved against the configuration file's directory"
            }
            settings.append(Setting(path: path, value: value, source: inFile == nil ? .default : .file, note: note))
        }
    }

    /// A value as compact JSON.
    private static func render(_ node: StrictJSON.Node) -> String {
        switch node.value {
        case .null: return "null"
        case .bool(let value): return "\(value)"
        case .number(let text): return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
        case .string(let text): return "\"\(UntrustedText.escaped(text, limit: 256))\""
        case .array(let elements): return "[" + elements.map(render).joined(separator: ", ") + "]"
        case .object(let members): return "{" + members.map { "\"\($0.key)\": \(render($0.value))" }.joined(separator: ", ") + "}"
        }
    }

    /// What an absent optional setting means.
    private static func meaningOfNull(path: String, node: StrictJSON.Node) -> String? {
        guard case .null = node.value else { return nil }
        if path.hasSuffix(".baseURL") {
            return path.contains(".Production.")
                ? "Apple's production: https://api.storekit.apple.com" : "Apple's sandbox: https://api.storekit-sandbox.apple.com"
        }
        if path == "retention.rawPayloadDays" { return "raw payloads kept for ever" }
        if path.hasSuffix(".appAppleId") { return "none: Production data refused" }
        if path.hasSuffix(".bundleId") { return "every app (an admin key, or a support key of every app)" }
        if path.hasPrefix("webhooks["), path.hasSuffix(".apps") { return "every app" }
        if path.hasPrefix("webhooks["), path.hasSuffix(".environments") { return "every environment its apps accept" }
        if path.hasPrefix("webhooks["), path.hasSuffix(".eventTypes") { return "every event type" }
        return nil
    }
}

extension ServerConfiguration {
    /// What `storekeeper config check` shows: the file read as `serve` reads it, and every setting with its source.
    package struct Check: Sendable {
        package var configuration: ServerConfiguration
        package var settings: [Setting]
        /// The settings as aligned lines.
        package var text: String
    }

    /// Reads `path` as ``load(path:)`` does and lists every setting; throws the same errors. A key's text or a secret
    /// pasted into a setting that takes any text (a name, an entitlement) is shown as a note, as errors show it.
    package static func check(path: String) throws(ConfigurationError) -> Check {
        let (configuration, document) = try read(path: path)
        let settings = configuration.settings(file: document).map { setting in
            var setting = setting
            setting.path = ConfigurationError.hidingSecrets(setting.path)
            setting.value = ConfigurationError.hidingSecrets(setting.value)
            setting.note = setting.note.map { ConfigurationError.hidingSecrets($0) }
            return setting
        }
        return Check(configuration: configuration, settings: settings, text: ConfigurationError.hidingSecrets(configuration.report(file: document)))
    }
}
