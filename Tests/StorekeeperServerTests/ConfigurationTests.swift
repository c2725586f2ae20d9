import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Crypto
import Foundation
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: configuration")
struct ConfigurationTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("config.example.json is a valid configuration; its key files are named when they cannot be read")
    func example() throws {
        let configuration = try ServerConfiguration.load(path: Self.repository.appendingPathComponent("config.example.json").path)
        #expect(configuration.apps.first?.serverAPI.keys.sorted() == ["Production", "Sandbox"])
        #expect(configuration.entitlements.productEntitlements["pro.yearly"] == ["pro"])
        #expect(configuration.http.maxConnections == 512 && configuration.retention.rawPayloadDays == 400)
        #expect(throws: ConfigurationError.self) { try configuration.makeServerAPIKeys() }
        do {
            _ = try configuration.makeServerAPIKeys()
        } catch {
            #expect("\(error)".contains("/etc/storekeeper/SubscriptionKey_2X9R4HXF34.p8"))
            #expect("\(error)".contains("com.example.storekeeper"))
        }
    }

    @Test("a minimal configuration (apps only) takes the defaults; a missing apps list is named")
    func minimal() throws {
        let directory = TestFiles.directory.appendingPathComponent("config-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let minimal = directory.appendingPathComponent("minimal.json")
        try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}], "entitlements": {"subscriptionLevels": {"pro.monthly": 1}}}"#
            .write(to: minimal, atomically: true, encoding: .utf8)
        let configuration = try ServerConfiguration.load(path: minimal.path)
        #expect(configuration.apiKeys.isEmpty && configuration.customerCache == .init())
        #expect(
            configuration.http == HTTPLimits(idleTimeout: 60, headerReadTimeout: 10, bodyReadTimeout: 30, responseTimeout: 60, maxConnections: 512))
        #expect(configuration.refusedNotificationsKept == 10_000 && configuration.retention.rawPayloadDays == nil)
        #expect(configuration.entitlements == EntitlementConfiguration(subscriptionLevels: ["pro.monthly": 1]))
        let noApps = directory.appendingPathComponent("no-apps.json")
        try #"{"apiKeys": []}"#.write(to: noApps, atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigurationError.self) { try ServerConfiguration.load(path: noApps.path) }
        #expect(error?.message.contains("apps") == true, "\(String(describing: error))")
    }

    @Test("App Store Server API credentials load per environment and every mistake is named, never the key")
    func serverAPICredentials() throws {
        let directory = TestFiles.directory.appendingPathComponent("config-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulator = try SimulatorDirectory.initialize(at: directory)
        let info = try simulator.loadAPIKeyInfo()
        let keyFile = simulator.apiPrivateKeyFile(keyId: info.keyId).path
        let keyText = try String(contentsOfFile: keyFile, encoding: .utf8)
        func configuration(_ credentials: [String: ServerAPICredentials]) -> ServerConfiguration {
            ServerConfiguration(
                apps: [.init(bundleId: "com.example.storekeeper", appAppleId: 1, environments: [.sandbox], serverAPI: credentials)],
                entitlements: .init(), apiKeys: []
            )
        }
        let good = ServerAPICredentials(issuerId: info.issuerId, keyId: info.keyId, privateKeyFile: keyFile, baseURL: "http://127.0.0.1:8090")
        let keys = try configuration(["Sandbox": good]).makeServerAPIKeys()
        let loaded = try #require(keys[VerifierKey(bundleId: "com.example.storekeeper", environment: .sandbox)])
        #expect(loaded.key.keyID == info.keyId && loaded.key.bundleID == "com.example.storekeeper" && loaded.baseURL == "http://127.0.0.1:8090")

        let notAKey = directory.appendingPathComponent("not-a-key.p8").path
        try "hello".write(toFile: notAKey, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: notAKey)
        var wrongIssuer = good
        wrongIssuer.issuerId = "issuer"
        var badURL = good
        badURL.baseURL = "ftp://example"
        var unreadable = good
        unreadable.privateKeyFile = directory.appendingPathComponent("missing.p8").path
        var garbage = good
        garbage.privateKeyFile = notAKey
        let cases: [([String: ServerAPICredentials], String)] = [
            (["Production": good], "an environment the app does not accept"),
            (["Sandbox": wrongIssuer], "issuerId must be a UUID"),
            (["Sandbox": badURL], "is not an http(s) URL"),
            (["Sandbox": unreadable], "missing.p8"),
            (["Sandbox": garbage], "not-a-key.p8"),
        ]
        for (credentials, expected) in cases {
            do {
                _ = try configuration(credentials).makeServerAPIKeys()
                Issue.record("accepted \(credentials)")
            } catch {
                #expect("\(error)".contains(expected), "\(error)")
                let showsKey = "\(error)".contains(keyText.split(separator: "\n")[1])  // no key material in the message
                #expect(!showsKey, "the error shows key material")
            }
        }
    }

    @Test(
        "mistakes in the apps list are named at load: unknown environment, duplicate app, no root, empty bundle ID, a root that is not a certificate",
        arguments: [
            (#"[{"bundleId": "a.b", "environments": ["Sandbx"]}]"#, #"app 'a.b': environment 'Sandbx' is not "Sandbox", "Production" or "Xcode""#),
            (
                #"[{"bundleId": "a.b", "environments": ["Xcode"]}]"#,
                #"app 'a.b' accepts Xcode but has no xcodeCertificate: give the certificate Xcode exports for the StoreKit configuration (Editor → Save Public Certificate)"#
            ),
            (
                #"[{"bundleId": "a.b", "environments": ["Sandbox"], "xcodeCertificate": "x.cer"}]"#,
                #"app 'a.b' has an xcodeCertificate but does not accept the Xcode environment: add "Xcode" to apps[0].environments, or remove it"#
            ),
            (
                #"[{"bundleId": "a.b", "environments": ["Sandbox"]}, {"bundleId": "a.b", "environments": ["Sandbox"]}]"#,
                "app 'a.b' is configured twice"
            ),
            (
                #"[{"bundleId": "a.b", "environments": ["Sandbox"], "trustedRoots": []}]"#,
                #"app 'a.b' trusts no root certificate: give "apple" (Apple Root CA - G3) or a certificate file"#
            ),
            (#"[{"bundleId": "", "environments": ["Sandbox"]}]"#, "apps[0].bundleId is empty"),
        ])
    func appMistakes(apps: String, message: String) throws {
        let file = TestFiles.directory.appendingPathComponent("config-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try #"{"apps": \#(apps)}"#.write(to: file, atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigurationError.self) { try ServerConfiguration.load(path: file.path) }
        #expect(error.map { "\($0)".hasPrefix("configuration: ") && "\($0)".hasSuffix(message) } == true, "\(String(describing: error))")
    }

    @Test(
        "connection limits, retention and recovery settings are checked, each mistake named",
        arguments: [
            (#""http": {"idleTimeoutSeconds": 0}"#, "http.idleTimeoutSeconds must be more than 0 and at most 3600, not 0"),
            (#""http": {"headerReadTimeoutSeconds": -1}"#, "http.headerReadTimeoutSeconds must be more than 0 and at most 3600, not -1"),
            (#""http": {"bodyReadTimeoutSeconds": 99999}"#, "http.bodyReadTimeoutSeconds must be more than 0 and at most 3600, not 99999"),
            (#""http": {"maxConnections": 0}"#, "http.maxConnections must be 1 to 1000000, not 0"),
            (#""retention": {"refusedNotifications": -5}"#, "retention.refusedNotifications must be 0 to 10000000, not -5"),
            (#""retention": {"rawPayloadDays": 0}"#, "retention.rawPayloadDays must be more than 0 and at most 36500, not 0"),
            (#""recovery": {"intervalSeconds": 0}"#, "recovery.intervalSeconds must be more than 0 and at most 86400, not 0"),
            (#""recovery": {"overlapSeconds": -1}"#, "recovery.overlapSeconds must be more than 0 and at most 86400, not -1"),
            (#""jobs": {"leaseSeconds": 2.5}"#, "jobs.leaseSeconds must be 3 to 3600, not 2.5"),
            (#""jobs": {"leaseSeconds": 3601}"#, "jobs.leaseSeconds must be 3 to 3600, not 3601"),
        ])
    func limits(fragment: String, message: String) throws {
        let file = TestFiles.directory.appendingPathComponent("config-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}], \#(fragment)}"#.write(
            to: file, atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigurationError.self) { try ServerConfiguration.load(path: file.path) }
        // Named where it is in the file, with the number as the file writes it.
        #expect(error?.message.hasSuffix(": " + message) == true, "\(String(describing: error))")
        #expect(error?.message.contains(".json:1:") == true, "\(String(describing: error))")
    }

    @Test("the jobs' lease lasts 60 s unless jobs.leaseSeconds says otherwise")
    func jobLease() throws {
        let file = TestFiles.directory.appendingPathComponent("config-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let app = #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}]"#
        try "\(app)}".write(to: file, atomically: true, encoding: .utf8)
        #expect(try ServerConfiguration.load(path: file.path).jobLeaseDuration == .seconds(60))
        try #"\#(app), "jobs": {"leaseSeconds": 7.5}}"#.write(to: file, atomically: true, encoding: .utf8)
        #expect(try ServerConfiguration.load(path: file.path).jobLeaseDuration == .milliseconds(7_500))
    }

    @Test("a trusted root file that is not a certificate is named when the verifiers are made")
    func rootNotACertificate() throws {
        let root = TestFiles.directory.appendingPathComponent("not-a-root-\(UUID()).pem")
        defer { try? FileManager.default.removeItem(at: root) }
        try "not a certificate".write(to: root, atomically: true, encoding: .utf8)
        let configuration = ServerConfiguration(
            apps: [.init(bundleId: "a.b", appAppleId: nil, environments: [.sandbox], trustedRoots: [root.path])], entitlements: .init(), apiKeys: []
        )
        let error = #expect(throws: ConfigurationError.self) { try configuration.makeVerifiers() }
        #expect(
            error.map { "\($0)" }?.hasPrefix("configuration: app 'a.b': the trusted root '\(root.path)' is not a certificate: neither PEM") == true,
            "\(String(describing: error))")
    }
}

/// What an operator mistypes in the configuration is refused at load, named where it is, never run on defaults.
@Suite("Storekeeper server: configuration read strictly")
struct StrictConfigurationTests {
    static func load(_ text: String) throws(ConfigurationError) -> ServerConfiguration {
        let file = TestFiles.directory.appendingPathComponent("config-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try? text.write(to: file, atomically: true, encoding: .utf8)
        return try ServerConfiguration.load(path: file.path)
    }

    static let app = #"{"bundleId": "com.example.app", "environments": ["Sandbox"]}"#

    /// The eleven typos an outside walkthrough tried: nine started the server on defaults.
    @Test(
        "every mistyped key is refused with its path and the key meant",
        arguments: [
            (#""entitlements": {"productEntitlement": {"pro.monthly": ["pro"]}}"#, "entitlements", "productEntitlement", "productEntitlements"),
            (#""entitlements": {"subscriptionLevel": {"pro.monthly": 1}}"#, "entitlements", "subscriptionLevel", "subscriptionLevels"),
            (#""recovery": {"enable": false}"#, "recovery", "enable", "enabled"),
            (#""http": {"idleTimeoutSecond": 5}"#, "http", "idleTimeoutSecond", "idleTimeoutSeconds"),
            (#""retention": {"rawPayloadsDays": 30}"#, "retention", "rawPayloadsDays", "rawPayloadDays"),
            (#""retention": {"refusedNotification": 5}"#, "retention", "refusedNotification", "refusedNotifications"),
            (#""customerCach": {"capacity": 0}"#, "the top level", "customerCach", "customerCache"),
            (#""job": {"leaseSeconds": 10}"#, "the top level", "job", "jobs"),
        ])
    func mistypedKeys(fragment: String, object: String, typo: String, meant: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(#"{"apps": [\#(Self.app)], \#(fragment)}"#) }
        #expect(
            error?.message.hasSuffix(#": unknown key "\#(typo)" in \#(object): did you mean "\#(meant)"?"#) == true, "\(String(describing: error))")
        #expect(error?.message.contains(":1:") == true, "line 1 named: \(String(describing: error))")
    }

    @Test(
        "a mistyped key inside an app or its credentials is refused too (serverApi, trustedRoot, baseUrl)",
        arguments: [
            (#"{"bundleId": "a.b", "environments": ["Sandbox"], "serverApi": {}}"#, "apps[0]", "serverApi", "serverAPI"),
            (#"{"bundleId": "a.b", "environments": ["Sandbox"], "trustedRoot": ["x.pem"]}"#, "apps[0]", "trustedRoot", "trustedRoots"),
            (
                #"{"bundleId": "a.b", "environments": ["Sandbox"], "serverAPI": {"Sandbox": {"issuerId": "i", "keyId": "k", "privateKeyFile": "f", "baseUrl": "http://x"}}}"#,
                "apps[0].serverAPI.Sandbox", "baseUrl", "baseURL"
            ),
        ])
    func mistypedAppKeys(app: String, object: String, typo: String, meant: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(#"{"apps": [\#(app)]}"#) }
        #expect(error?.message.hasSuffix(#"unknown key "\#(typo)" in \#(object): did you mean "\#(meant)"?"#) == true, "\(String(describing: error))")
    }

    @Test("several mistyped keys are named at once, each with its line and column, and at most five of them")
    func severalMistypedKeys() throws {
        let error = #expect(throws: ConfigurationError.self) {
            try Self.load("{\"apps\": [\(Self.app)],\n\"job\": {\"leaseSeconds\": 10},\n\"recovery\": {\"enable\": false}}")
        }
        let message = error?.message ?? ""
        #expect(message.contains(#":2:1: unknown key "job" in the top level: did you mean "jobs"?; "#), "\(message)")
        #expect(message.hasSuffix(#":3:14: unknown key "enable" in recovery: did you mean "enabled"?"#), "\(message)")
        let many = (0..<40).map { #""zz\#($0)": 1"# }.joined(separator: ", ")
        let bounded = #expect(throws: ConfigurationError.self) { try Self.load(#"{"apps": [\#(Self.app)], "jobs": {\#(many)}}"#) }
        let said = bounded?.message ?? ""
        #expect(said.components(separatedBy: #"unknown key ""#).count - 1 == 5 && said.hasSuffix("; and more unknown keys"), "\(said)")
        #expect(said.contains(#""zz4""#) && !said.contains(#""zz5""#), "\(said)")
    }

    @Test("a key nothing is near lists the keys known there")
    func unknownWithoutNeighbour() throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(#"{"apps": [\#(Self.app)], "jobs": {"zzzzzz": 1}}"#) }
        #expect(
            error?.message.contains(#"unknown key "zzzzzz" in jobs (known here: consumptionCheckSeconds, leaseSeconds)"#) == true,
            "\(String(describing: error))")
    }

    @Test(
        "a value of the wrong type names its path, its line and column, what was expected and what was found",
        arguments: [
            (
                "{\n  \"apps\": [{\"bundleId\": \"a.b\", \"appAppleId\": \"645\", \"environments\": [\"Sandbox\"]}]\n}",
                #":2:46: apps[0].appAppleId: expected a whole number, found the string "645""#
            ),
            (
                "{\"apps\": [{\"bundleId\": \"a.b\", \"environments\": \"Sandbox\"}]}",
                #":1:47: apps[0].environments: expected a list, found the string "Sandbox""#
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)],\n \"customerCache\": {\"capacity\": 1.5}}",
                ":2:32: customerCache.capacity: expected a whole number, found the number 1.5"
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)],\n \"recovery\": {\"enabled\": \"no\"}}",
                #":2:26: recovery.enabled: expected true or false, found the string "no""#
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)], \"entitlements\": {\"productEntitlements\": {\"pro.monthly\": \"pro\"}}}",
                #"entitlements.productEntitlements["pro.monthly"]: expected a list, found the string "pro""#
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)], \"apiKeys\": [{\"name\": \"k\", \"sha256\": \"x\", \"scope\": \"App\"}]}",
                #"apiKeys[0].scope: 'App' is not a scope: give "app" (one app's customers), "support" (the support API, one app's or every app's) or "admin" (any)"#
            ),
            ("{\"apps\": [{\"environments\": [\"Sandbox\"]}]}", #"apps[0]: the required key "bundleId" is missing"#),
            // Checked after decoding, and still located.
            (
                "{\"apps\": [{\"bundleId\": \"a.b\",\n  \"environments\": [\"Sandbox\", \"Sandbx\"]}]}",
                #":2:31: app 'a.b': environment 'Sandbx' is not "Sandbox", "Production" or "Xcode""#
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)],\n \"apiKeys\": [{\"name\": \"k\", \"sha256\": \"\(String(repeating: "a", count: 64))\", \"scope\": \"admin\"},\n"
                    + " {\"name\": \"k\", \"sha256\": \"\(String(repeating: "b", count: 64))\", \"scope\": \"admin\"}]}",
                ":3:11: two API keys are named 'k'"
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)], \"apiKeys\": [{\"name\": \"a\\tb\", \"sha256\": \"\(String(repeating: "a", count: 64))\", \"scope\": \"admin\"}]}",
                "apiKeys[0].name has a control character (U+0009) at character 2: it must be 1 to 100 characters"
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)], \"apiKeys\": [{\"name\": \" \", \"sha256\": \"\(String(repeating: "a", count: 64))\", \"scope\": \"admin\"}]}",
                "apiKeys[0].name is only white space: it must be 1 to 100 characters, none of them a control character, and no white space at either end"
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)], \"apiKeys\": [{\"name\": \"ops \", \"sha256\": \"\(String(repeating: "a", count: 64))\", \"scope\": \"admin\"}]}",
                "apiKeys[0].name ends with white space"
            ),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)], \"http\": {\"maxConnections\": 99999999999999999999}}",
                "http.maxConnections: 99999999999999999999 is out of range"
            ),
        ])
    func wrongTypes(text: String, message: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(text) }
        #expect(error?.message.contains(message) == true, "\(String(describing: error))")
        #expect(error.map { !"\($0)".contains("DecodingError") && !"\($0)".contains("Debug description") } == true)
    }

    /// A key's text pasted where a certificate's path or a URL belongs is refused, located, and never echoed.
    @Test("a private key pasted into trustedRoots, xcodeCertificate or a baseURL is refused without being echoed")
    func pastedKeyNotEchoed() throws {
        let body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSECRETSECRETSECRET"
        let pem = "-----BEGIN PRIVATE KEY-----\\n\(body)\\n-----END PRIVATE KEY-----"
        let cases: [(String, String)] = [
            (#"{"bundleId": "a.b", "environments": ["Sandbox"], "trustedRoots": ["\#(pem)"]}"#, "apps[0].trustedRoots[0]"),
            (
                #"{"bundleId": "a.b", "environments": ["Sandbox", "Xcode"], "trustedRoots": ["apple"], "xcodeCertificate": "\#(pem)"}"#,
                "apps[0].xcodeCertificate"
            ),
            (
                #"{"bundleId": "a.b", "environments": ["Sandbox"], "serverAPI": {"Sandbox": {"issuerId": "\#(UUID())", "keyId": "2X9R4HXF34", "privateKeyFile": "k.p8", "baseURL": "\#(pem)"}}}"#,
                #"apps[0].serverAPI["Sandbox"].baseURL"#
            ),
        ]
        for (app, setting) in cases {
            let error = #expect(throws: ConfigurationError.self) { try Self.load(#"{"apps": [\#(app)]}"#) }
            #expect(error?.setting == setting, "\(String(describing: error))")
            #expect(error?.message.contains("looks like a key's text") == true, "\(String(describing: error))")
            #expect(error.map { !"\($0)".contains("SECRET") && !"\($0)".contains("MIGH") } == true, "\(String(describing: error))")
        }
        // Where any text is accepted (an entitlement, a product ID as a key), `config check` shows a note instead of the
        // key's text, in its lines and in its JSON. (An API key's name is logged: one is refused, ConfigurationPartsTests.)
        let file = TestFiles.path("pasted-\(UUID()).json")
        try #"""
        {"apps": [\#(Self.app)],
         "entitlements": {"productEntitlements": {"pro.monthly": ["\#(pem)"], "\#(pem)": ["pro"]}, "subscriptionLevels": {"\#(pem)": 1}}}
        """#.write(to: file, atomically: true, encoding: .utf8)
        let check = try ServerConfiguration.check(path: file.path)
        let shown = check.text + String(decoding: try JSONEncoder().encode(check.settings), as: UTF8.self)
        #expect(!shown.contains("SECRET") && !shown.contains("MIGH") && shown.contains("(a key's text, not shown)"), "\(check.text)")
        // Whatever error quotes one (a path read later, say), the key's text is not shown.
        let quoted = ConfigurationError("the trusted root '/etc/-----BEGIN PRIVATE KEY-----\\n\(body)' does not exist")
        #expect(quoted.message == "the trusted root '/etc/(a key's text, not shown)' does not exist", "\(quoted.message)")
    }

    /// A file the configuration names that is not there, or not what it should be, is found by the commands that read
    /// it (`serve`, `config check`, …) and located in the configuration: the line to fix, not only the path.
    @Test("a missing or unreadable file the configuration names (a trusted root, a private key) is named with its line and column")
    func missingFilesLocated() throws {
        let directory = TestFiles.directory.appendingPathComponent("config-files-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let notACertificate = directory.appendingPathComponent("root.pem")
        try "not a certificate".write(to: notACertificate, atomically: true, encoding: .utf8)
        let cases: [(text: String, setting: String, message: String)] = [
            (
                "{\"apps\": [{\"bundleId\": \"a.b\", \"environments\": [\"Sandbox\"],\n  \"trustedRoots\": [\"apple\", \"simulatr/root.pem\"]}]}",
                "apps[0].trustedRoots[1]", ":2:29: app 'a.b': the trusted root '\(directory.path)/simulatr/root.pem' does not exist"
            ),
            (
                "{\"apps\": [{\"bundleId\": \"a.b\", \"environments\": [\"Sandbox\"],\n  \"trustedRoots\": [\"root.pem\"]}]}",
                "apps[0].trustedRoots[0]", ":2:20: app 'a.b': the trusted root '\(notACertificate.path)' is not a certificate"
            ),
            (
                "{\"apps\": [{\"bundleId\": \"a.b\", \"environments\": [\"Sandbox\"],\n  \"serverAPI\": {\"Sandbox\": {\"issuerId\": \"\(UUID())\", \"keyId\": \"2X9R4HXF34\",\n"
                    + "    \"privateKeyFile\": \"keys/AuthKey.p8\"}}}]}",
                #"apps[0].serverAPI["Sandbox"].privateKeyFile"#, ":3:23: app 'a.b' (Sandbox): serverAPI privateKeyFile: "
            ),
            (
                "{\"apps\": [{\"bundleId\": \"a.b\", \"environments\": [\"Sandbox\"],\n  \"serverAPI\": {\"Sandbox\": {\"issuerId\": \"issuer\", \"keyId\": \"2X9R4HXF34\",\n"
                    + "    \"privateKeyFile\": \"keys/AuthKey.p8\"}}}]}",
                #"apps[0].serverAPI["Sandbox"].issuerId"#, ":2:41: app 'a.b' (Sandbox): serverAPI issuerId must be a UUID"
            ),
        ]
        for (text, setting, message) in cases {
            let file = directory.appendingPathComponent("storekeeper.json")
            try text.write(to: file, atomically: true, encoding: .utf8)
            let configuration = try ServerConfiguration.load(path: file.path)
            let error = #expect(throws: ConfigurationError.self) {
                _ = try configuration.makeVerifiers()
                _ = try configuration.makeServerAPIKeys()
            }
            #expect(error?.setting == setting, "\(String(describing: error))")
            #expect(error?.message.hasPrefix(file.path + message) == true, "\(String(describing: error))")
        }
    }

    @Test(
        "JSON that is not valid is named with its line and column, trailing commas and keys given twice included",
        arguments: [
            (
                "{\n  \"apps\": [\n    {\"bundleId\": \"a.b\" \"environments\": []}\n  ]\n}",
                ":3:24: not valid JSON: unexpected '\"': expected ',' or '}' after the value of \"bundleId\""
            ),
            ("{\"apps\": [\(StrictConfigurationTests.app)],\n}", ":2:1: not valid JSON: a comma before '}': JSON allows no trailing comma"),
            ("{\"apps\": [\(StrictConfigurationTests.app),]}", "not valid JSON: a comma before ']': JSON allows no trailing comma"),
            (
                "{\"apps\": [\(StrictConfigurationTests.app)],\n \"apps\": []}",
                #":2:2: not valid JSON: the key "apps" is given twice in one object (first at line 1, column 2)"#
            ),
            ("{\"apps\": [\(StrictConfigurationTests.app)] // the app\n}", "not valid JSON: a comment: JSON has none (remove it)"),
            ("{'apps': []}", ":1:2: not valid JSON: unexpected ''': expected a key in double quotes"),
            ("", ":1:1: not valid JSON: it is empty (an object was expected)"),
            ("{\"apps\": [\(StrictConfigurationTests.app)]", "not valid JSON: unexpected end of file: the object is not closed with '}'"),
        ])
    func invalidJSON(text: String, message: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(text) }
        #expect(error?.message.contains(message) == true, "\(String(describing: error))")
    }

    @Test("relative file paths are resolved against the configuration file's directory, whatever the working directory")
    func relativePaths() throws {
        let directory = TestFiles.directory.appendingPathComponent("config-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulator = try SimulatorDirectory.initialize(at: directory.appendingPathComponent("sim"))
        let info = try simulator.loadAPIKeyInfo()
        let file = directory.appendingPathComponent("storekeeper.json")
        try #"""
        {"apps": [{"bundleId": "com.example.storekeeper", "environments": ["Sandbox"], "trustedRoots": ["sim/ca/root.pem", "apple"],
          "serverAPI": {"Sandbox": {"issuerId": "\#(info.issuerId)", "keyId": "\#(info.keyId)", "privateKeyFile": "./sim/api/AuthKey_\#(info.keyId).p8"}}}]}
        """#.write(to: file, atomically: true, encoding: .utf8)
        let configuration = try ServerConfiguration.load(path: file.path)
        #expect(configuration.apps[0].trustedRoots == [simulator.rootCertificateFile.standardizedFileURL.path, "apple"])
        #expect(configuration.apps[0].serverAPI["Sandbox"]?.privateKeyFile == simulator.apiPrivateKeyFile(keyId: info.keyId).standardizedFileURL.path)
        // The files are found from any working directory, since the paths are absolute now.
        #expect(try configuration.makeVerifiers().count == 1)
        #expect(try configuration.makeServerAPIKeys().count == 1)
        let check = try ServerConfiguration.check(path: file.path)
        let root = try #require(check.settings.first { $0.path == "apps[0].trustedRoots" })
        #expect(root.source == .file && root.note?.contains("resolved against the configuration file's directory") == true, "\(root)")
    }

    @Test("a support key supports one configured app or every app; one naming an app not configured is refused, naming the key")
    func supportKeys() throws {
        let hash = String(repeating: "a", count: 64)
        let every = try Self.load(#"{"apps": [\#(Self.app)], "apiKeys": [{"name": "desk", "sha256": "\#(hash)", "scope": "support"}]}"#)
        #expect(every.apiKeys.first?.scope == .support && every.apiKeys.first?.bundleId == nil)
        let one = try Self.load(
            #"{"apps": [\#(Self.app)], "apiKeys": [{"name": "desk", "sha256": "\#(hash)", "scope": "support", "bundleId": "com.example.app"}]}"#)
        #expect(one.apiKeys.first?.bundleId == "com.example.app")
        let error = #expect(throws: ConfigurationError.self) {
            try Self.load(
                #"{"apps": [\#(Self.app)], "apiKeys": [{"name": "desk", "sha256": "\#(hash)", "scope": "support", "bundleId": "com.example.nope"}]}"#)
        }
        #expect(
            error?.message.contains("API key 'desk' (apiKeys[0]): a support key's bundleId must be a configured app (com.example.app)") == true,
            "\(String(describing: error))")
    }

    @Test("config check lists every setting with its source, masks API key hashes, and says what null means")
    func check() throws {
        let file = TestFiles.directory.appendingPathComponent("config-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let hash = ServerConfiguration.hash(apiKey: "sk_secret")
        try
            #"{"apps": [\#(Self.app)], "customerCache": {"capacity": 0}, "apiKeys": [{"name": "ios", "sha256": "\#(hash)", "scope": "app", "bundleId": "com.example.app"}]}"#
            .write(to: file, atomically: true, encoding: .utf8)
        let check = try ServerConfiguration.check(path: file.path)
        let byPath = Dictionary(uniqueKeysWithValues: check.settings.map { ($0.path, $0) })
        #expect(byPath["customerCache.capacity"]?.value == "0" && byPath["customerCache.capacity"]?.source == .file)
        #expect(byPath["customerCache.maxAgeSeconds"]?.value == "60" && byPath["customerCache.maxAgeSeconds"]?.source == .default)
        #expect(byPath["recovery.enabled"]?.value == "true" && byPath["recovery.enabled"]?.source == .default)
        #expect(byPath["retention.rawPayloadDays"]?.note == "raw payloads kept for ever")
        #expect(byPath["apps[0].trustedRoots"]?.value == #"["apple"]"# && byPath["apps[0].trustedRoots"]?.source == .default)
        #expect(byPath["apiKeys[0].sha256"]?.value == "\"\(hash.prefix(8))…\"" && byPath["apiKeys[0].sha256"]?.note == "masked")
        #expect(!check.text.contains(hash), "the whole hash is never printed")
        for expected in [
            "http.idleTimeoutSeconds", "http.maxConnections", "jobs.leaseSeconds", "recovery.overlapSeconds", "retention.refusedNotifications",
            "entitlements.billingRetryGrantsAccess", "apps[0].appAppleId", "apps[0].serverAPI",
        ] {
            #expect(byPath[expected] != nil, "\(expected) is listed")
        }
    }

    @Test("a key's text pasted where its path belongs, and a password in baseURL, are refused without being echoed")
    func secretsNeverEchoed() throws {
        let pem = P256.Signing.PrivateKey().pemRepresentation
        let body = String(pem.split(separator: "\n")[1])
        let escaped = pem.replacingOccurrences(of: "\n", with: "\\n")
        let keyText = try #require(
            Optional(
                #"{"apps": [{"bundleId": "a.b", "environments": ["Sandbox"], "serverAPI": {"Sandbox": {"issuerId": "57246542-96fe-1a63-e053-0824d011072a", "keyId": "K", "privateKeyFile": "\#(escaped)"}}}]}"#
            ))
        let error = #expect(throws: ConfigurationError.self) { try Self.load(keyText) }
        #expect(error?.message.contains("holds what looks like a key's text, not a path") == true, "\(String(describing: error))")
        #expect(error.map { !"\($0)".contains(body.prefix(12)) } == true, "no key material in the error")
        let password =
            #"{"apps": [{"bundleId": "a.b", "environments": ["Sandbox"], "serverAPI": {"Sandbox": {"issuerId": "57246542-96fe-1a63-e053-0824d011072a", "keyId": "K", "privateKeyFile": "k.p8", "baseURL": "http://admin:hunter2@127.0.0.1:8090"}}}]}"#
        let refused = #expect(throws: ConfigurationError.self) { try Self.load(password) }
        #expect(
            refused?.message.contains("baseURL carries a user or password") == true && refused?.message.contains("hunter2") == false,
            "\(String(describing: refused))")
    }

    @Test(
        "bundle IDs hold letters, digits, '-' and '.' only; an environment listed twice is refused",
        arguments: [
            (#"{"bundleId": "com example/bad", "environments": ["Sandbox"]}"#, "is not a bundle ID"),
            (#"{"bundleId": "com.example.storekeeper ", "environments": ["Sandbox"]}"#, "is not a bundle ID"),
            (#"{"bundleId": "com.example.app", "environments": ["Sandbox", "Sandbox"]}"#, "lists an environment twice"),
        ])
    func bundleIds(app: String, message: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try Self.load(#"{"apps": [\#(app)]}"#) }
        #expect(error?.message.contains(message) == true && error?.message.contains(".json:1:") == true, "\(String(describing: error))")
    }
}
