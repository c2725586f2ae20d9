import AppStoreModels
import AppStoreSigning
import Foundation
import StorekeeperCore

/// Checking a configuration after it is decoded: what a type cannot say (a bundle ID's characters, an environment's
/// name, a key's text pasted where a path belongs, ranges, credentials that must go together), each mistake thrown
/// with its setting, which ``ServerConfiguration/load(path:)`` locates in the file.
extension ServerConfiguration {
    package func validate() throws(ConfigurationError) {
        let found = problems()
        guard let first = found.first else { return }
        throw found.count == 1 ? first : ConfigurationError.combining(found)
    }

    /// The first mistake of each part of the configuration (its apps, their offers, the relay, the caches and limits,
    /// events and webhooks, jobs and entitlements, API keys): a file with mistakes in several parts has them all said at
    /// once, not one per run. Within a part, the first only (a later check of a part may assume the earlier ones held).
    func problems() -> [ConfigurationError] {
        guard !apps.isEmpty else { return [ConfigurationError("no apps configured: \"apps\" lists at least one")] }
        var found: [ConfigurationError] = []
        func check(_ part: () throws(ConfigurationError) -> Void) {
            do { try part() } catch { found.append(error) }
        }
        check { () throws(ConfigurationError) in try validateApps() }
        // The offers' keys load now, so that a wrong one stops `serve` and `config check`, never a request.
        check { () throws(ConfigurationError) in _ = try makeOfferKeys() }
        check { () throws(ConfigurationError) in try relay?.validate() }
        check { () throws(ConfigurationError) in try validateSettings() }
        check { () throws(ConfigurationError) in try validateEvents() }
        check { () throws(ConfigurationError) in try validateJobsAndEntitlements() }
        check { () throws(ConfigurationError) in try validateAPIKeys() }
        return found
    }

    /// Whether `keyId` is a key ID as App Store Connect makes them (10 letters and digits; up to 64 accepted): never
    /// the key itself pasted in the wrong place, which an error must then not repeat.
    package static func isKeyId(_ keyId: String) -> Bool {
        (1...64).contains(keyId.utf8.count) && keyId.utf8.allSatisfy { (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) }
    }

    /// Whether `bundleId` is a bundle ID as Apple makes them: 1-155 ASCII letters, digits, '-' and '.' (the
    /// configuration's apps, and every command's `--bundle-id`).
    package static func isBundleId(_ bundleId: String) -> Bool {
        (1...155).contains(bundleId.utf8.count) && bundleId.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }
    }

    /// Whether `text` holds what looks like a secret: an API key (`sk_` and 43 characters), a webhook secret (`whsec_`
    /// and its base64) or a key's text. Names are logged; a secret pasted as one would be too. Twenty characters after
    /// the prefix at least (errors hide from eight on): `sk_support_desk` is a name.
    package static func holdsSecret(_ text: String) -> Bool {
        SecretFile.looksLikeKeyText(text) || ConfigurationError.hidingSecrets(text, shortest: 20) != text
    }

    /// The most characters an API key's name may have.
    package static let keyNameLimit = 100

    /// Whether `name` may name an API key: 1 to ``keyNameLimit`` characters, none a control character, no white space
    /// at either end (logs and the audit log show it).
    package static func isKeyName(_ name: String) -> Bool { keyNameProblem(name) == nil }

    /// What breaks the rule of ``isKeyName(_:)``, in words (`is empty`, `has 5000 characters`, `has a control
    /// character (U+0007) at character 4`); `nil` for a name that keeps it.
    package static func keyNameProblem(_ name: String) -> String? {
        if name.isEmpty { return "is empty" }
        // A name is logged with every request the key makes: a key's own text there would be logged with it.
        if holdsSecret(name) { return "looks like a secret (an API key, a webhook secret or a key's text, not repeated here): give it a name" }
        if name.count > keyNameLimit { return "has \(name.count) characters" }
        // A name of spaces shows as nothing in a log; one with a space at an end as another key's name.
        if name.allSatisfy(\.isWhitespace) { return "is only white space" }
        if name.first?.isWhitespace == true { return "begins with white space" }
        if name.last?.isWhitespace == true { return "ends with white space" }
        for (offset, character) in name.enumerated() {
            guard let scalar = character.unicodeScalars.first(where: { $0.properties.generalCategory == .control }) else { continue }
            return "has a control character (U+\(String(format: "%04X", scalar.value))) at character \(offset + 1)"
        }
        return nil
    }

    private func validateApps() throws(ConfigurationError) {
        var seen = Set<String>()
        for (index, app) in apps.enumerated() {
            let name = "apps[\(index)]"
            guard !app.bundleId.isEmpty else { throw ConfigurationError("\(name).bundleId is empty", setting: "\(name).bundleId") }
            // Apple's bundle IDs: letters, digits, '-' and '.'.
            if SecretFile.looksLikeKeyText(app.bundleId) {
                throw ConfigurationError(
                    "\(name).bundleId holds what looks like a key's text (never repeated): give the app's bundle ID", setting: "\(name).bundleId")
            }
            guard Self.isBundleId(app.bundleId) else {
                throw ConfigurationError(
                    "\(name).bundleId \(UntrustedText.quoted(app.bundleId, limit: 32)) is not a bundle ID: letters, digits, '-' and '.' only (no spaces)",
                    setting: "\(name).bundleId"
                )
            }
            guard Set(app.environments).count == app.environments.count else {
                throw ConfigurationError("app '\(app.bundleId)' lists an environment twice (\(name).environments)", setting: "\(name).environments")
            }
            guard seen.insert(app.bundleId).inserted else {
                throw ConfigurationError("app '\(app.bundleId)' is configured twice", setting: "\(name).bundleId")
            }
            guard !app.environments.isEmpty else {
                throw ConfigurationError(
                    "app '\(app.bundleId)' accepts no environment (\(name).environments is empty)", setting: "\(name).environments")
            }
            for (offset, environment) in app.environments.enumerated() where ![.sandbox, .production, .xcode].contains(environment) {
                throw ConfigurationError(
                    "app '\(app.bundleId)': environment \(UntrustedText.quoted(environment.rawValue, limit: 64)) is not \"Sandbox\", \"Production\" or \"Xcode\"",
                    setting: "\(name).environments[\(offset)]")
            }
            if app.environments.contains(.xcode), app.xcodeCertificate?.isEmpty != false {
                throw ConfigurationError(
                    "app '\(app.bundleId)' accepts Xcode but has no xcodeCertificate: give the certificate Xcode exports for the StoreKit configuration (Editor → Save Public Certificate)",
                    setting: "\(name).xcodeCertificate")
            }
            if app.xcodeCertificate != nil, !app.environments.contains(.xcode) {
                throw ConfigurationError(
                    "app '\(app.bundleId)' has an xcodeCertificate but does not accept the Xcode environment: add \"Xcode\" to \(name).environments, or remove it",
                    setting: "\(name).xcodeCertificate")
            }
            // A key's text pasted where a path belongs: refused without being echoed.
            for (offset, root) in app.trustedRoots.enumerated() where SecretFile.looksLikeKeyText(root) {
                throw ConfigurationError(
                    "app '\(app.bundleId)': \(name).trustedRoots[\(offset)] holds what looks like a key's text, not a path: give a certificate file's path, or \"apple\"",
                    setting: "\(name).trustedRoots[\(offset)]")
            }
            if let certificate = app.xcodeCertificate, SecretFile.looksLikeKeyText(certificate) {
                throw ConfigurationError(
                    "app '\(app.bundleId)': \(name).xcodeCertificate holds what looks like a key's text, not a path: give the certificate file Xcode exports",
                    setting: "\(name).xcodeCertificate")
            }
            if app.trustedRoots.isEmpty {
                throw ConfigurationError(
                    "app '\(app.bundleId)' trusts no root certificate: give \"apple\" (Apple Root CA - G3) or a certificate file",
                    setting: "\(name).trustedRoots")
            }
            if app.environments.contains(.production) && app.appAppleId == nil {
                throw ConfigurationError("app '\(app.bundleId)' accepts Production but has no appAppleId", setting: name)
            }
            for (environment, credentials) in app.serverAPI.sorted(by: { $0.key < $1.key }) {
                let which = "app '\(app.bundleId)' (\(UntrustedText.escaped(environment, limit: 64)))"
                let at = "\(name).serverAPI[\"\(environment)\"]"
                if SecretFile.looksLikeKeyText(credentials.privateKeyFile) {
                    throw ConfigurationError(
                        "\(which): serverAPI privateKeyFile holds what looks like a key's text, not a path: give the .p8 file's path (the key is never copied into the configuration)",
                        setting: "\(at).privateKeyFile")
                }
                guard Self.isKeyId(credentials.keyId) else {
                    // Never echoed: it may be the key's text, pasted in the wrong place.
                    throw ConfigurationError(
                        "\(which): serverAPI keyId is not a key ID (letters and digits, like 2X9R4HXF34)", setting: "\(at).keyId")
                }
                if let base = credentials.baseURL, SecretFile.looksLikeKeyText(base) {
                    throw ConfigurationError(
                        "\(which): serverAPI baseURL holds what looks like a key's text, not a URL: give the App Store Server API's base URL, or leave it out",
                        setting: "\(at).baseURL")
                }
                if let base = credentials.baseURL, let url = URL(string: base), url.user != nil || url.password != nil {
                    throw ConfigurationError(
                        "\(which): serverAPI baseURL carries a user or password: remove it (the App Store Server API authenticates with the key)",
                        setting: "\(at).baseURL")
                }
            }
            if let problem = app.consumption.problems().first {
                throw ConfigurationError("app '\(app.bundleId)': consumption.\(problem)", setting: "\(name).consumption")
            }
            if app.consumption.policy == .rules, app.serverAPI.isEmpty {
                throw ConfigurationError(
                    "app '\(app.bundleId)': consumption policy \"rules\" answers through the App Store Server API, and the app has no serverAPI credentials",
                    setting: "\(name).consumption.policy")
            }
            for environment in app.serverAPI.keys.sorted() where !app.environments.contains(AppStoreEnvironment(rawValue: environment)) {
                throw ConfigurationError(
                    "app '\(app.bundleId)': serverAPI credentials for \(UntrustedText.quoted(environment, limit: 64)), an environment the app does not accept "
                        + "(\(app.environments.map(\.rawValue).joined(separator: ", ")))",
                    setting: "\(name).serverAPI[\"\(environment)\"]")
            }
        }
    }

    private func validateSettings() throws(ConfigurationError) {
        if customerCache.capacity < 0 {
            throw ConfigurationError(
                "customerCache.capacity must be 0 (off) or more, not \(customerCache.capacity)", setting: "customerCache.capacity")
        }
        if !(customerCache.maxAgeSeconds > 0 && customerCache.maxAgeSeconds <= 86_400) {
            throw ConfigurationError(
                "customerCache.maxAgeSeconds must be more than 0 and at most 86400, not \(ConfigurationError.number(customerCache.maxAgeSeconds))",
                setting: "customerCache.maxAgeSeconds"
            )
        }
        try http.validate()
        if !(0...10_000_000).contains(retention.refusedNotifications) {
            throw ConfigurationError(
                "retention.refusedNotifications must be 0 to 10000000, not \(retention.refusedNotifications)",
                setting: "retention.refusedNotifications"
            )
        }
        if let days = retention.rawPayloadDays, !(days > 0 && days <= 36_500) {
            throw ConfigurationError(
                "retention.rawPayloadDays must be more than 0 and at most 36500, not \(ConfigurationError.number(days))",
                setting: "retention.rawPayloadDays"
            )
        }
        for (name, value) in [
            ("intervalSeconds", recovery.intervalSeconds), ("overlapSeconds", recovery.overlapSeconds),
            ("failuresIntervalSeconds", recovery.failuresIntervalSeconds),
        ] where !(value > 0 && value <= 86_400) {
            throw ConfigurationError(
                "recovery.\(name) must be more than 0 and at most 86400, not \(ConfigurationError.number(value))", setting: "recovery.\(name)")
        }
    }

    private func validateJobsAndEntitlements() throws(ConfigurationError) {
        if !(jobs.leaseSeconds >= 3 && jobs.leaseSeconds <= 3_600) {
            throw ConfigurationError(
                "jobs.leaseSeconds must be 3 to 3600, not \(ConfigurationError.number(jobs.leaseSeconds))", setting: "jobs.leaseSeconds")
        }
        if !(jobs.consumptionCheckSeconds >= 0.05 && jobs.consumptionCheckSeconds <= 3_600) {
            throw ConfigurationError(
                "jobs.consumptionCheckSeconds must be 0.05 to 3600, not \(ConfigurationError.number(jobs.consumptionCheckSeconds))",
                setting: "jobs.consumptionCheckSeconds")
        }
        for (product, level) in entitlements.subscriptionLevels.sorted(by: { $0.key < $1.key }) where !(1...1_000).contains(level) {
            throw ConfigurationError(
                "entitlements.subscriptionLevels[\"\(product)\"] must be 1 (the highest) to 1000, not \(level)",
                setting: "entitlements.subscriptionLevels[\"\(product)\"]"
            )
        }
        for (product, seconds) in entitlements.nonRenewingDurations.sorted(by: { $0.key < $1.key }) where !(seconds > 0) {
            throw ConfigurationError(
                "entitlements.nonRenewingDurations[\"\(product)\"] must be more than 0 seconds, not \(ConfigurationError.number(seconds))",
                setting: "entitlements.nonRenewingDurations[\"\(product)\"]"
            )
        }
        for (product, names) in entitlements.productEntitlements.sorted(by: { $0.key < $1.key }) where names.isEmpty || names.contains("") {
            throw ConfigurationError(
                "entitlements.productEntitlements[\"\(product)\"] must list one or more non-empty entitlement names",
                setting: "entitlements.productEntitlements[\"\(product)\"]")
        }
    }

    private func validateAPIKeys() throws(ConfigurationError) {
        var names = Set<String>()
        for (index, key) in apiKeys.enumerated() {
            if let problem = Self.keyNameProblem(key.name) {
                throw ConfigurationError(
                    "apiKeys[\(index)].name \(problem): it must be 1 to \(Self.keyNameLimit) characters, none of them a control "
                        + "character, and no white space at either end (it is what logs and the audit log show)", setting: "apiKeys[\(index)].name")
            }
            guard key.sha256.count == 64, key.sha256.allSatisfy(\.isHexDigit) else {
                throw ConfigurationError(
                    "API key '\(key.name)' (apiKeys[\(index)]): sha256 must be 64 hex digits (what `storekeeper api-key` prints)",
                    setting: "apiKeys[\(index)].sha256"
                )
            }
            guard names.insert(key.name).inserted else {
                throw ConfigurationError(
                    "two API keys are named '\(key.name)': each needs its own name (it is what logs show)", setting: "apiKeys[\(index)].name")
            }
            switch key.scope {
            case .app:
                guard let bundle = key.bundleId, apps.contains(where: { $0.bundleId == bundle }) else {
                    throw ConfigurationError(
                        "API key '\(key.name)' (apiKeys[\(index)]): an app key needs the bundleId of a configured app (\(apps.map(\.bundleId).joined(separator: ", ")))",
                        setting: key.bundleId == nil ? "apiKeys[\(index)]" : "apiKeys[\(index)].bundleId")
                }
            case .support:
                if let bundle = key.bundleId, !apps.contains(where: { $0.bundleId == bundle }) {
                    throw ConfigurationError(
                        "API key '\(key.name)' (apiKeys[\(index)]): a support key's bundleId must be a configured app (\(apps.map(\.bundleId).joined(separator: ", "))), or absent for every app",
                        setting: "apiKeys[\(index)].bundleId")
                }
            case .admin:
                if key.bundleId != nil {
                    throw ConfigurationError(
                        "API key '\(key.name)' (apiKeys[\(index)]): an admin key acts for every app; remove its bundleId, or make it scope \"app\"",
                        setting: "apiKeys[\(index)].bundleId")
                }
            }
        }
        var hashes = Set<String>()
        for (index, key) in apiKeys.enumerated() where !hashes.insert(key.sha256.lowercased()).inserted {
            throw ConfigurationError("two API keys have the same sha256: each key must be its own", setting: "apiKeys[\(index)].sha256")
        }
    }
}
