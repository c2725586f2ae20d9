import Foundation
import Glibc
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// `--database`, `--from` and `--to` as an operator mistypes them, and ledger files another user left: each refused
/// in words that say what to do, never showing a password.
@Suite("storekeeper database arguments and ledger files")
struct LedgerArgumentTests {
    @Test("a URL without its scheme, a mistyped or unusable PostgreSQL URL: usage mistakes (64), the password never shown")
    func databaseURLs() async throws {
        let cases: [([String], String)] = [
            (["events", "list", "--database", "storekeeper:SECRETPW@db.internal"], "--database looks like user:password@host"),
            (
                ["events", "list", "--database", "postgres://u:SECRETPW@127.0.0.1:1/db?pool_size=0"],
                "error: invalid-option: --database: pool_size must be"
            ),
            (
                ["events", "list", "--database", "postgres://u:SECRETPW@127.0.0.1:notaport/db"],
                "error: invalid-option: --database: the database URL cannot be read as a URL"
            ),
            (["copy", "--from", "none.sqlite", "--to", "postgres:/u:SECRETPW@h/db"], "--to looks like a mistyped PostgreSQL URL"),
            (["copy", "--from", "none.sqlite", "--to", "/tmp/x.sqlite"], "error: invalid-option: --to must be a postgres:// URL"),
            (["copy", "--from", "none.sqlite", "--to", ""], "error: invalid-option: --to is empty: give a postgres:// URL"),
            (["copy", "--from", "none.sqlite", "--to", "u:SECRETPW@h"], "write it postgres://user@host:5432/database"),
            (["backup", "--database", "x.sqlite", "--to", "u:SECRETPW@h"], "give a SQLite file's path, or a file of that name as ./name"),
        ]
        for (arguments, said) in cases {
            let run = try await CLI.runDetached(arguments)
            #expect(run.status == 64 && run.stderr.contains(said) && !run.stderr.contains("SECRETPW"), "\(arguments): \(run.stderr)")
        }
        // A scheme in capitals is still PostgreSQL's (nothing listens on port 1: a storage failure, not a usage one).
        let capitals = try await CLI.runDetached(["events", "list", "--database", "POSTGRES://u:SECRETPW@127.0.0.1:1/db?connect_timeout=2"])
        #expect(
            capitals.status == 1 && capitals.stderr.hasPrefix("error: storage: ") && !capitals.stderr.contains("SECRETPW"), "\(capitals.stderr)")
        // An IPv6 host, bracketed in the URL, is PostgreSQL's too: connection refused, as for 127.0.0.1.
        let ipv6 = try await CLI.runDetached(["events", "list", "--database", "postgres://u:SECRETPW@[::1]:1/db?connect_timeout=2"])
        #expect(
            ipv6.status == 1 && ipv6.stderr.contains("postgres://u:***@[::1]:1/db") && !ipv6.stderr.contains("does not resolve"), "\(ipv6.stderr)")
        // An error line written to a pipe whose reader is gone, with SIGPIPE ignored (as a supervisor may start it):
        // the command still ends with its own status, not a trap.
        let closed = try await ChildProcess.run(
            "/bin/bash",
            [
                "-c",
                "trap '' PIPE; '\(CLI.binary.path)' events list --database ':SECRETPW@h' 2>&1 >/dev/null | head -c 1 >/dev/null; echo ${PIPESTATUS[0]}",
            ])
        #expect(String(decoding: closed.output, as: UTF8.self) == "64\n")
        let reconcile = try await CLI.runDetached(["reconcile", "--config", "x.json", "--customer", ""])
        #expect(reconcile.status == 64 && reconcile.stderr.contains("is not a customer ID"), "\(reconcile.stderr)")
        // Customer IDs and paths with `:` and `@` are shown as they are: only a URL's password is masked.
        let directory = try CLI.temporaryDirectory("u:pw@x")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("nope.sqlite").path
        let missing = try await CLI.runDetached(["events", "list", "--database", path])
        #expect(missing.status == 1 && missing.stderr.contains("no SQLite ledger at '\(path)'"), "\(missing.stderr)")
        let folder = try await CLI.runDetached(["backup", "--database", directory.path + "/", "--to", path])
        #expect(
            folder.status == 1 && folder.stderr.contains("is a directory: give the path of a file (e.g. \(directory.path)/storekeeper.sqlite)"),
            "\(folder.stderr)")
        let device = try await CLI.runDetached(["backup", "--database", "/dev/zero", "--to", path])
        #expect(device.status == 1 && device.stderr.contains("/dev/zero is not a regular file"), "\(device.stderr)")
    }

    @Test("files that are not what an option wants say what is wanted, in words the secret masking leaves whole")
    func filesOfTheWrongKind() async throws {
        let directory = try CLI.temporaryDirectory("wrong-kind")
        defer { try? FileManager.default.removeItem(at: directory) }
        let binary = directory.appendingPathComponent("k.p8").path
        _ = FileManager.default.createFile(atPath: binary, contents: Data([0xFF, 0xFE, 0x00, 0x80]), attributes: [.posixPermissions: 0o600])
        let token = try await CLI.runDetached([
            "token", "--issuer-id", "57246542-96fe-1a63-e053-0824d011072a", "--key-id", "K", "--bundle-id", "b", "--private-key", binary,
        ])
        #expect(token.status == 1 && token.stderr.contains("a .p8 file is PEM text: a BEGIN PRIVATE KEY block"), "\(token.stderr)")
        let root = try await CLI.runDetached(["verify", "--root", binary, "x"])
        #expect(root.stderr.contains("neither PEM (a BEGIN CERTIFICATE block) nor DER") && !root.stderr.contains("not shown"), "\(root.stderr)")
        let verify = try await CLI.runDetached(["verify", "--bundle-id", "a\u{1B}b", "x"])
        #expect(verify.status == 64 && verify.stderr.contains("--bundle-id is not a bundle ID"), "\(verify.stderr)")
        let config = directory.appendingPathComponent("config.json").path
        try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}]}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let zero = try await CLI.runDetached(["import", "--config", config, "--file", "/dev/zero"])
        #expect(zero.status == 1 && zero.stderr.contains("/dev/zero is not a regular file (a device or a pipe?)"), "\(zero.stderr)")
        // A pipe as the ledger: refused before the lock file or SQLite's journal is made beside it (`serve` used to
        // block opening it; given /dev/zero, it made /dev/zero.lock and /dev/zero-journal).
        let pipe = directory.appendingPathComponent("ledger.pipe").path
        #expect(mkfifo(pipe, 0o600) == 0)
        let served = try await CLI.runDetached(["serve", "--config", config, "--port", "0", "--database", pipe])
        #expect(served.status == 1 && served.stderr.contains("ledger.pipe is not a regular file (a device or a pipe?)"), "\(served.stderr)")
        #expect(!FileManager.default.fileExists(atPath: pipe + ".lock") && !FileManager.default.fileExists(atPath: pipe + "-journal"))
        let rootDevice = try await CLI.runDetached(["verify", "--root", "/dev/zero", "x"])
        #expect(rootDevice.status == 1 && rootDevice.stderr.contains("'/dev/zero' is not a regular file"), "\(rootDevice.stderr)")
        let configDevice = try await CLI.runDetached(["config", "check", "--config", "/dev/zero"])
        #expect(configDevice.stderr.contains("the configuration file '/dev/zero' is not a regular file"), "\(configDevice.stderr)")
        let named = try await CLI.runDetached(["api-key", "--scope", "admin", "--name", String(repeating: "n", count: 101)])
        #expect(named.status == 64 && named.stderr.contains("has 101 characters: it must be 1 to 100 characters"), "\(named.stderr)")
        #expect(!named.stderr.contains(String(repeating: "n", count: 65)), "the refused name is shown bounded")
        let blank = try await CLI.runDetached(["api-key", "--scope", "admin", "--name", " "])
        #expect(blank.status == 64 && blank.stderr.contains("' ' is only white space"), "\(blank.stderr)")
        let pasted = "sk_" + String(repeating: "Zq4t", count: 11)
        let secretName = try await CLI.runDetached(["api-key", "--scope", "admin", "--name", pasted])
        #expect(secretName.status == 64 && secretName.stderr.contains("--name looks like a secret"), "\(secretName.stderr)")
        #expect(!secretName.stderr.contains("Zq4t"), "the pasted key is not repeated")
        _ = FileManager.default.createFile(atPath: binary, contents: Data([0xFF, 0xFE]))
        let commerce = try await CLI.runDetached([
            "sign", "advanced-commerce", "--issuer-id", "57246542-96fe-1a63-e053-0824d011072a", "--key-id", "K", "--bundle-id", "b",
            "--private-key", binary, "@" + binary,
        ])
        #expect(commerce.status == 64 && commerce.stderr.contains("the request is not UTF-8 text"), "\(commerce.stderr)")
    }

    @Test(
        "the benchmarks' load needs no privilege (its sockets set TCP_NODELAY, not SO_DEBUG)",
        .enabled(if: getuid() == 0, "run as root, the test acts as nobody"))
    func benchmarkUnprivileged() async throws {
        let run = try await OperatorErrorTests.runUnprivileged(["bench", "ingest", "--count", "20", "--concurrency", "2"])
        #expect(run.status == 0 && run.stdout.contains("fullSpeed"), "\(run.stderr)")
    }

    @Test(
        "a lock file, a ledger or its log another user left: whose it is and what to do; the directory matters only to make log files",
        .enabled(if: getuid() == 0, "files of another user need the tests to run as root (they then act as nobody)"))
    func filesOfAnotherUser() async throws {
        let (directory, ledger, config) = try await OperatorErrorTests.sharedLedger(
            "other-user", webhooks: #"[{"name": "b", "url": "http://127.0.0.1:9/", "secret": "\#(WebhookSecret.generate())"}]"#)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = FileManager.default.createFile(atPath: ledger + ".lock", contents: nil, attributes: [.posixPermissions: 0o644])
        try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: ledger)
        let locked = try await OperatorErrorTests.runUnprivileged(["serve", "--config", config, "--port", "0", "--database", ledger])
        #expect(
            locked.status == 1
                && locked.stderr.contains("Permission denied (owned by uid 0, mode 644): run storekeeper as the user who owns the ledger"),
            "\(locked.stderr)")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: ledger)
        for command in [["events", "list"], ["events", "resume", "--config", config, "--endpoint", "b"]] {
            let refused = try await OperatorErrorTests.runUnprivileged(command + ["--database", ledger])
            #expect(refused.status != 0 && refused.stderr.contains("it is owned by uid 0, mode 600: run as"), "\(command): \(refused.stderr)")
        }
        // Ledger and log files this user may write, in a directory it may not: enough to write.
        try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: ledger)
        for suffix in ["-wal", "-shm"] {
            _ = FileManager.default.createFile(atPath: ledger + suffix, contents: nil, attributes: [.posixPermissions: 0o666])
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory.path) }
        let written = try await OperatorErrorTests.runUnprivileged(["events", "resume", "--database", ledger, "--config", config, "--endpoint", "b"])
        #expect(written.status == 0 && written.stdout.contains(#""name" : "b""#), "\(written.stdout)\(written.stderr)")
    }
}
