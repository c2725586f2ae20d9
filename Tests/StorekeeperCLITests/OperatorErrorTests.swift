import AppStoreModels
import Foundation
import Glibc
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// Errors in words an operator can act on, not a library's internals.
@Suite("storekeeper errors an operator can act on")
struct OperatorErrorTests {
    /// Runs the binary as an unprivileged user when the tests run as root (root may write anywhere), so that a
    /// directory's mode means what it means to an operator's service account.
    static func runUnprivileged(_ arguments: [String]) async throws -> CLI.Output {
        guard getuid() == 0 else { return try await CLI.runDetached(arguments) }
        let result = try await ChildProcess.run(
            "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary.path] + arguments)
        let output = CLI.Output(
            status: result.termination.status, stdout: String(decoding: result.output, as: UTF8.self),
            stderr: String(decoding: result.error, as: UTF8.self))
        return output
    }

    /// A new, empty ledger that everyone may write, without its log's files, in a directory everyone may write, and a
    /// configuration everyone may read (its `webhooks`' JSON given): for tests that run the binary as another user.
    static func sharedLedger(_ name: String, webhooks: String = "[]") async throws -> (directory: URL, ledger: String, config: String) {
        let directory = try CLI.temporaryDirectory(name)
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory.path)
        let ledger = directory.appendingPathComponent("ledger.sqlite").path
        try await SQLiteLedgerStore(path: ledger).close()
        // Closing emptied the log; its files, left behind by root, would be refused too.
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: ledger + suffix) }
        try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: ledger)
        let config = directory.appendingPathComponent("config.json").path
        try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}], "webhooks": \#(webhooks)}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: config)
        return (directory, ledger, config)
    }

    @Test("a write-ahead log file left beside the ledger that this process may not write is named, with what to do about it")
    func unwritableLogFiles() async throws {
        let (directory, ledger, config) = try await Self.sharedLedger("log-files")
        defer { try? FileManager.default.removeItem(at: directory) }
        for (suffix, advice) in [("-shm", "or delete it while no process has the ledger open"), ("-wal", "never delete it")] {
            _ = FileManager.default.createFile(atPath: ledger + suffix, contents: nil, attributes: [.posixPermissions: 0o444])
            let run = try await Self.runUnprivileged(["serve", "--config", config, "--port", "0", "--database", ledger])
            #expect(
                run.status == 1
                    && run.stderr.contains(
                        "error: storage: the SQLite ledger's file \(ledger)\(suffix) cannot be read and written by this process (Permission denied)")
                    && run.stderr.contains(advice), "\(suffix): \(run.stderr)")
            // A command that only reads opens the ledger read-only: the file is readable, which is enough.
            let listed = try await Self.runUnprivileged(["events", "list", "--database", ledger])
            #expect(listed.status == 0, "\(suffix): \(listed.stderr)")
            try FileManager.default.removeItem(atPath: ledger + suffix)
        }
    }

    @Test("a ledger in a directory this process may not write, a directory given as the ledger, a file that is not a ledger: each said in words")
    func ledgerPaths() async throws {
        let directory = try CLI.temporaryDirectory("ledger-paths")
        defer {
            try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.appendingPathComponent("read-only").path)
            try? FileManager.default.removeItem(at: directory)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        let config = directory.appendingPathComponent("config.json").path
        try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}]}"#.write(toFile: config, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: config)
        let readOnly = directory.appendingPathComponent("read-only")
        try FileManager.default.createDirectory(at: readOnly, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: readOnly.path)

        let denied = try await Self.runUnprivileged([
            "serve", "--config", config, "--port", "0", "--database", readOnly.appendingPathComponent("ledger.sqlite").path,
        ])
        #expect(denied.status == 1)
        #expect(
            denied.stderr.contains(
                "error: storage: the directory \(readOnly.path) of the SQLite ledger is not writable by this process (Permission denied): SQLite keeps its write-ahead log"
            ), "\(denied.stderr)")
        #expect(!denied.stderr.contains("SQLite error") && !denied.stderr.contains("PRAGMA"), "\(denied.stderr)")

        let isDirectory = try await CLI.runDetached(["serve", "--config", config, "--port", "0", "--database", directory.path])
        #expect(isDirectory.status == 1 && isDirectory.stderr.contains("is a directory: give the path of a file"), "\(isDirectory.stderr)")

        // Another program's SQLite database, an empty file, a simulator's database: none is made a ledger, none changed.
        let foreign = directory.appendingPathComponent("users.sqlite").path
        let users = try SQLiteLedgerStoreFixtures.foreignDatabase(at: foreign)
        let empty = directory.appendingPathComponent("empty.sqlite").path
        _ = FileManager.default.createFile(atPath: empty, contents: nil)
        let sim = directory.appendingPathComponent("sim").path
        #expect(try await CLI.runDetached(["simulator", "init", sim]).status == 0)
        // A configuration with credentials (recover and reconcile need them), never used: the ledger is refused first.
        let withCredentials = directory.appendingPathComponent("credentials.json").path
        try P256KeyFile.write(to: directory.appendingPathComponent("k.p8").path)
        try
            #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"], "serverAPI": {"Sandbox": {"issuerId": "57246542-96fe-1a63-e053-0824d011072a", "keyId": "K", "privateKeyFile": "k.p8", "baseURL": "http://127.0.0.1:9"}}}]}"#
            .write(toFile: withCredentials, atomically: true, encoding: .utf8)
        for (file, named) in [
            (foreign, "is a SQLite database but not a Storekeeper ledger (its tables: users)"), (empty, "holds no ledger (an empty database)"),
            (sim + "/simulator.sqlite", "is not a Storekeeper ledger (its migrations: v1"),
        ] {
            let before = try Data(contentsOf: URL(fileURLWithPath: file))
            for command in [["recover", "--dry-run"], ["reconcile", "--all", "--dry-run"]] {
                let refused = try await CLI.runDetached(command + ["--config", withCredentials, "--database", file])
                #expect(
                    refused.status == 1 && refused.stderr.contains(named) && refused.stderr.contains("nothing was changed"),
                    "\(command) \(file): \(refused.stderr)")
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == before, "\(file) was not changed")
        }
        let served = try await CLI.runDetached(["serve", "--config", config, "--port", "0", "--database", foreign])
        #expect(served.status == 1 && served.stderr.contains("not a Storekeeper ledger"), "\(served.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: foreign)) == users)

        let notALedger = try await CLI.runDetached(["recover", "--config", config, "--database", config])
        #expect(notALedger.status == 1, "\(notALedger.stderr)")
        let notALedgerServed = try await CLI.runDetached(["serve", "--config", config, "--port", "0", "--database", config])
        #expect(
            notALedgerServed.status == 1 && notALedgerServed.stderr.contains("is not a SQLite database (is --database the right file?)"),
            "\(notALedgerServed.stderr)")
    }

    @Test("a flag's value of Apple's open sets that this build does not know is refused, naming the values, before anything is sent")
    func strictFlagValues() async throws {
        let directory = try CLI.temporaryDirectory("api-flags")
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try await CLI.runDetached(["simulator", "init", directory.appendingPathComponent("sim").path]).status == 0)
        let keyFile = try #require(
            try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("sim/api").path).first { $0.hasSuffix(".p8") })
        // Nothing listens at port 9: had anything been sent, the error would be a transport one.
        let environment = [
            "APPSTORE_ISSUER_ID": "57246542-96fe-1a63-e053-0824d011072a", "APPSTORE_KEY_ID": "K", "APPSTORE_BUNDLE_ID": "com.example.storekeeper",
            "APPSTORE_BASE_URL": "http://127.0.0.1:9", "APPSTORE_PRIVATE_KEY": directory.appendingPathComponent("sim/api/\(keyFile)").path,
        ]
        for (arguments, named) in [
            (
                [
                    "api", "consumption", "2000000000000001", "--customer-consented", "--delivery-status", "DELIVERD", "--sample-content-provided",
                    "false",
                ], "--delivery-status 'DELIVERD' is not one of DELIVERED"
            ),
            (["api", "notifications", "--since", "2026-11-01T00:00:00Z", "--type", "REFUNDED"], "--type 'REFUNDED' is not one of SUBSCRIBED"),
            (["api", "history", "2000000000000001", "--revoked", "yes"], "The value 'yes' is invalid for '--revoked"),
            (
                ["reconcile", "--config", "/nonexistent.json", "--all", "--environment", "sandbox"],
                "--environment must be Production or Sandbox, not 'sandbox'"
            ),
            (["api-key", "--scope", "Admin"], "--scope must be app, support or admin"),
            (
                ["api", "history", "2000000000000001", "--base-url", "http://user:s3cret@127.0.0.1:9"],
                "--base-url carries a user or password: remove it"
            ),
            (
                ["api", "history", "2000000000000001", "--base-url", "ftp://127.0.0.1:9"],
                "--base-url must be an http(s) URL with a host, not 'ftp://"
            ),
        ] {
            let output = try await CLI.runDetached(arguments, environment: environment)
            #expect(output.status != 0 && output.stderr.contains(named), "\(arguments): \(output.stderr)")
            #expect(!output.stderr.contains("transport"), "nothing was sent: \(output.stderr)")
            #expect(!output.stderr.contains("s3cret"), "a credential echoed: \(output.stderr)")
        }
    }

    @Test(
        "a mistyped command or option is named, with the nearest right one, even where a required option then looks missing; a command's own failure reads error: like the others"
    )
    func mistypedCommandsAndOptions() async throws {
        let cases: [([String], String)] = [
            (["serve", "--confg", "x.json"], "Error: Unknown option '--confg'. Did you mean '--config'?"),
            (["serv", "--config", "x.json"], "Error: Unknown command 'serv'. Did you mean 'serve'?"),
            (["events", "lsit"], "Error: Unknown command 'lsit'. Did you mean 'list'?"),
            (["events", "list", "--databse", "x"], "Error: Unknown option '--databse'. Did you mean '--database'?"),
            (["simulator", "serv"], "Error: Unknown command 'serv'. Did you mean 'serve'?"),
            (["verify", "--bundel-id=x", "y"], "Error: Unknown option '--bundel-id'. Did you mean '--bundle-id'?"),
            (["recover", "--config", "x.json", "--sinse", "2026-01-01T00:00:00Z"], "Error: Unknown option '--sinse'. Did you mean '--since'?"),
            // The default subcommand's options, where no subcommand is named (`simulator` serves).
            (
                ["simulator", "--dir", "sim", "--notfy-url", "http://127.0.0.1:9/"],
                "Error: Unknown option '--notfy-url'. Did you mean '--notify-url'?"
            ),
            (["serve", "-x"], "Error: Unknown option '-x'"),
            // A value the command itself refuses: its own usage.
            (["api-key", "--scope", "root"], "Error: --scope must be app, support or admin\nUsage: storekeeper api-key [--scope"),
            (
                ["token", "--issuer-id", "i", "--key-id", "k", "--bundle-id", "b", "--private-key", "k.p8", "--lifetime", "99999"],
                "Error: --lifetime must be 1 to 3600 seconds (Apple refuses a token that lives longer), not 99999"
            ),
            (
                ["token", "--issuer-id", "not-a-uuid", "--key-id", "k", "--bundle-id", "b", "--private-key", "k.p8"],
                "Error: --issuer-id is not an issuer ID (a UUID, like 57246542-96fe-1a63-e053-0824d011072a)"
            ),
            (
                ["simulator", "buy", "--customer", "c", "--product", "p", "--quantity", "0"],
                "Error: --quantity must be 1 to 10 (more than 1 for consumables only), not 0"
            ),
            (["simulator", "buy", "--customer", "c", "--product", "p", "--app-account-token", "x"], "Error: --app-account-token must be a UUID"),
            (["simulator", "advance", "--days", "0"], "Error: --days must be a positive number (the clock only moves forward), not 0.0"),
            (["simulator", "advance"], "Error: give --days or --seconds (how far to move the clock)"),
            (["simulator", "advance", "--days=1e300"], "Error: --days moves the clock at most 100 years (36525 days) at once, not 1e+300"),
            (["simulator", "advance", "--days=1e-300"], "Error: --days and --seconds must move the clock at least a millisecond"),
            (["bench", "ingest", "--count", "0"], "Error: --count must be 10 to 1000000, not 0"),
            (
                ["bench", "events", "--pairs", "-1"],
                "Error: Missing value for '--pairs <pairs>': -1 is a negative number, which --pairs does not take (it reads as an option)"
            ),
            (["bench", "events", "--pairs=-1", "--rounds", "0"], "Error: --pairs must be 0 to 100, not -1"),
            // Refused by the command once it runs (it reads the value): `error: invalid-option: …`, a usage mistake too.
            (["events", "list", "--database", "none.sqlite", "--limit", "0"], "error: invalid-option: --limit must be 1 to 100000, not 0"),
            (
                ["events", "list", "--database", "none.sqlite", "--bundle-id", "bad id"],
                "error: invalid-option: --bundle-id 'bad id' is not a bundle ID: letters, digits, '-' and '.' only"
            ),
        ]
        for (arguments, said) in cases {
            let run = try await CLI.runDetached(arguments)
            #expect(run.status == 64 && run.stderr.hasPrefix(said), "\(arguments): \(run.stderr)")
        }
        // No simulator there: said in the system's words, not NIO's (which repeat themselves, with a stray parenthesis).
        let absent = try await CLI.runDetached(["simulator", "customer", "--id", "c", "--url", "http://127.0.0.1:9"])
        #expect(
            absent.status == 1 && absent.stderr == "error: unreachable: no simulator answered at http://127.0.0.1:9: connection refused\n",
            "\(absent.stderr)")
        // A key pasted as a value (it starts with dashes, so it would read as an unknown option): named as a key on the
        // command line, not echoed; nor are control characters in a mistyped option.
        let pasted = try await CLI.runDetached([
            "token", "--issuer-id", "-----BEGIN PRIVATE KEY-----MIGHAgEAMBMGByqGSM49AgEG-----END PRIVATE KEY-----", "--key-id", "k",
            "--bundle-id", "b", "--private-key", "k.p8",
        ])
        #expect(
            pasted.status == 64 && pasted.stderr.contains("a key's text is on the command line, where a file's path goes")
                && pasted.stderr.contains("APPSTORE_PRIVATE_KEY_PEM") && !pasted.stderr.contains("MIGHAgEAMBMG"), "\(pasted.stderr)")
        let forged = try await CLI.runDetached(["serve", "--x\u{1B}[31m\nfake: ok"])
        #expect(forged.status == 64 && forged.stderr.contains("\\u{1B}") && !forged.stderr.contains("\nfake: ok"), "\(forged.stderr)")
        // A key in a value that is checked, or printed in a refusal: never shown.
        let body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgevZzL1gdAFr88hb2OF"
        let issuer = "57246542-96fe-1a63-e053-0824d011072a"
        for arguments in [
            ["token", "--issuer-id", issuer, "--key-id", "K", "--bundle-id", " -----BEGIN PRIVATE KEY-----\(body)", "--private-key", "k.p8"],
            ["token", "--issuer-id", issuer, "--key-id", "K", "--bundle-id", "b", "--private-key", body],
            ["verify", "--bundle-id", " -----BEGIN PRIVATE KEY-----\(body)", "-"],
        ] {
            let run = try await CLI.runDetached(arguments)
            #expect(run.status != 0 && !run.stderr.contains("MIGHAgEAMBMG") && !run.stdout.contains("MIGHAgEAMBMG"), "\(arguments): \(run.stderr)")
        }
        // A command's own refusal of a value: escaped and bounded too.
        let since = try await CLI.runDetached(["events", "list", "--database", "none.sqlite", "--since", "x\u{1B}[31m\nfake: ok"])
        #expect(since.status == 64 && since.stderr.contains("\\u{1B}") && !since.stderr.contains("\nfake: ok"), "\(since.stderr)")
        // A key in an error line goes with its END line; what follows it stays.
        let keyPath = try await CLI.runDetached([
            "events", "list", "--database", "a-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----b.sqlite",
        ])
        #expect(
            keyPath.status == 1 && keyPath.stderr.contains("a(a key's text, not shown)b.sqlite") && keyPath.stderr.contains("check --database")
                && !keyPath.stderr.contains("MIGHAgEAMBMG"), "\(keyPath.stderr)")
        // A PostgreSQL URL with its slashes mistyped is named as one, never read as a file name nor echoed (its
        // password); a password in any error line is masked.
        for arguments in [
            ["events", "list", "--database", "postgres:/u:s3cret@h/db"], ["backup", "--database", "postgresql:u:s3cret@h/db", "--to", "b.sqlite"],
            ["events", "list", "--database", "Postgres:/u:s3cret@h/db"],
        ] {
            let run = try await CLI.runDetached(arguments)
            #expect(
                run.status == 64 && run.stderr.contains("--database looks like a mistyped PostgreSQL URL") && !run.stderr.contains("s3cret"),
                "\(arguments): \(run.stderr)")
        }
        let hidden = try await CLI.runDetached(["events", "list", "--database", "ftp:/u:s3cret@h/ledger.sqlite"])
        #expect(hidden.status == 1 && hidden.stderr.contains("ftp:/u:***@h/ledger.sqlite") && !hidden.stderr.contains("s3cret"), "\(hidden.stderr)")
        // A long argument (a JWS given inline) leaves ArgumentParser's message as it is.
        let inline = try await CLI.runDetached(["verify", String(repeating: "eyJhbGciOiJFUzI1NiJ9", count: 100), "--environment"])
        #expect(inline.status == 64 && inline.stderr.contains("\nUsage: ") && !inline.stderr.contains("\\n"), "\(inline.stderr)")
        // ArgumentParser's own line breaks stay line breaks.
        let bare = try await CLI.runDetached(["serve"])
        #expect(bare.status == 64 && bare.stderr.contains("\nUsage: ") && !bare.stderr.contains("\\n"), "\(bare.stderr)")
        // Right words still get ArgumentParser's own answers: a missing value, help.
        let missing = try await CLI.runDetached(["serve", "--config"])
        #expect(missing.status == 64 && missing.stderr.contains("Missing value for '--config <config>'"), "\(missing.stderr)")
        let help = try await CLI.runDetached(["help", "serve"])
        #expect(help.status == 0 && help.stdout.contains("OVERVIEW: Serve"), "\(help.stderr)")
        // A storage failure of a command without its own reporting: `error: storage: …`, status 1.
        let directory = try CLI.temporaryDirectory("events-list-dir")
        defer { try? FileManager.default.removeItem(at: directory) }
        let events = try await CLI.runDetached(["events", "list", "--database", directory.path])
        #expect(
            events.status == 1 && events.stderr.hasPrefix("error: storage: the SQLite ledger \(directory.path) is a directory"), "\(events.stderr)")
    }

    @Test("backup, simulator init and recover --since name what is wrong with their arguments in words")
    func argumentsInWords() async throws {
        let directory = try CLI.temporaryDirectory("arguments")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("a-file").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let initOnFile = try await CLI.runDetached(["simulator", "init", file])
        #expect(initOnFile.status == 1 && initOnFile.stderr.contains("exists and is a file"), "\(initOnFile.stderr)")

        let ledger = directory.appendingPathComponent("ledger.sqlite").path
        _ = try SQLiteLedgerStore(path: ledger)
        let noDirectory = try await CLI.runDetached(["backup", "--database", ledger, "--to", directory.appendingPathComponent("nope/b.sqlite").path])
        #expect(
            noDirectory.status == 1 && noDirectory.stderr.contains("the backup's directory") && noDirectory.stderr.contains("does not exist"),
            "\(noDirectory.stderr)")
        #expect(!noDirectory.stderr.contains("SQLite error"))

        let config = directory.appendingPathComponent("config.json").path
        try
            #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"], "serverAPI": {"Sandbox": {"issuerId": "57246542-96fe-1a63-e053-0824d011072a", "keyId": "K", "privateKeyFile": "k.p8"}}}]}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        let key = directory.appendingPathComponent("k.p8").path
        try P256KeyFile.write(to: key)
        let future = try await CLI.runDetached(["recover", "--config", config, "--database", ledger, "--since", "2099-01-01T00:00:00Z"])
        // A value refused as the command runs is a usage mistake too (64), as `recover --since yesterday` is.
        #expect(future.status == 64 && future.stderr.contains("is more than a year in the future"), "\(future.stderr)")
        let unparsable = try await CLI.runDetached(["recover", "--config", config, "--database", ledger, "--since", "yesterday"])
        #expect(unparsable.status == 64 && unparsable.stderr.hasPrefix("error: invalid-option: "), "\(unparsable.stderr)")
    }
}
