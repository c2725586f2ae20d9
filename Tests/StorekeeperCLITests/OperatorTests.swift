import AppStoreModels
import AppStoreSimulator
import AsyncHTTPClient
import Crypto
import Foundation
import Glibc
import NIOCore
import NIOHTTP1
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

/// A long-running `storekeeper` command as a child process, its output going to files a test reads while it runs
/// (a pipe nobody reads would block it), and that a test can signal.
final class RunningCommand: Sendable {
    let process: ChildProcess
    let stdoutFile: URL
    let stderrFile: URL

    init(_ arguments: [String], in directory: URL, environment: [String: String] = [:], executable: URL = CLI.binary) throws {
        let name = UUID().uuidString
        stdoutFile = directory.appendingPathComponent("\(name).out")
        stderrFile = directory.appendingPathComponent("\(name).err")
        process = try ChildProcess(executable.path, arguments, environment: environment, output: .file(stdoutFile), error: .file(stderrFile))
    }

    var stdout: String { String(decoding: (try? Data(contentsOf: stdoutFile)) ?? Data(), as: UTF8.self) }
    var stderr: String { String(decoding: (try? Data(contentsOf: stderrFile)) ?? Data(), as: UTF8.self) }

    /// Waits until `text` appears in standard output or error (true), or the command ends or `seconds` pass (false).
    func waitFor(_ text: String, within seconds: Double = 30) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if stdout.contains(text) || stderr.contains(text) { return true }
            if !process.isRunning { return stdout.contains(text) || stderr.contains(text) }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// The port a server printed (`… on http://127.0.0.1:PORT …`) on standard output (its log, on standard error, may
    /// name another server's address on this machine first: the App Store's).
    func port() async throws -> Int {
        let deadline = ContinuousClock.now + .seconds(30)
        while !stdout.contains("http://127.0.0.1:"), process.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let text = stdout
        #expect(text.contains("http://127.0.0.1:"), "\(stderr)")
        let range = try #require(text.range(of: "127.0.0.1:"))
        return try #require(Int(text[range.upperBound...].prefix { $0.isNumber }))
    }

    func signal(_ number: Int32) { process.signal(number) }

    /// Waits for the command to end (up to `seconds`, then SIGKILL); its exit status.
    func finish(within seconds: Double = 60) async throws -> Int32 {
        await process.finish(within: seconds).status
    }

    /// Stops it for good.
    func stop() { process.kill() }
}

/// What an operator runs twice, interrupts or mistypes: refused or handled, never silently wrong.
@Suite("storekeeper as an operator runs it")
struct OperatorTests {
    static func get(_ url: String) async throws -> (status: UInt, body: String) {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        return (response.status.code, String(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    @Test("two serve processes on one SQLite ledger: the second is refused naming the first's PID; serve says when it creates a ledger")
    func oneServerPerSQLiteLedger() async throws {
        let directory = try CLI.temporaryDirectory("one-writer")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (_, config, database) = try CrashRecoveryTests.setUp(in: directory)
        let first = try RunningCommand(["serve", "--config", config, "--database", database, "--port", "0"], in: directory)
        defer { first.stop() }
        _ = try await first.port()
        #expect(first.stderr.contains("no SQLite ledger at this path: creating a new, empty one"), "\(first.stderr)")

        // A new ledger in a directory that does not exist: a mistyped path, refused (no directory made, nothing served).
        let typo = directory.appendingPathComponent("ledgr/ledger.sqlite").path
        let mistyped = try await CLI.runDetached(["serve", "--config", config, "--database", typo, "--port", "0"])
        #expect(
            mistyped.status == 1
                && mistyped.stderr.contains("error: no-such-directory: no directory '\(directory.path)/ledgr' for a new SQLite ledger at '\(typo)'"),
            "\(mistyped.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("ledgr").path))
        // Neither a path nor a PostgreSQL URL; a file where the directory should be.
        for (database, said) in [
            ("", "error: invalid-option: --database is empty"),
            ("mysql://user:secret@127.0.0.1/x", "error: invalid-option: --database is a mysql:// URL (not shown: it may hold a password)"),
            (config + "/ledger.sqlite", "error: no-such-directory: '\(config)' is a file, not a directory"),
        ] {
            let refused = try await CLI.runDetached(["serve", "--config", config, "--database", database, "--port", "0"])
            #expect(refused.status == (said.contains("invalid-option") ? 64 : 1) && refused.stderr.contains(said), "\(database): \(refused.stderr)")
            #expect(!refused.stderr.contains("secret"))
        }
        // `backup` and `copy` read SQLite files: a URL is refused as such, never repeated (it may hold a password).
        for arguments in [
            ["backup", "--database", "postgres://user:secret@127.0.0.1:1/x", "--to", directory.appendingPathComponent("b.sqlite").path],
            ["backup", "--database", database, "--to", "mysql://user:secret@127.0.0.1/x"],
            ["copy", "--from", "postgres://user:secret@127.0.0.1:1/x", "--to", "postgres://user:secret@127.0.0.1:1/y"],
        ] {
            let refused = try await CLI.runDetached(arguments)
            #expect(refused.status == 64 && refused.stderr.hasPrefix("error: invalid-option: "), "\(arguments): \(refused.stderr)")
            #expect(!refused.stderr.contains("secret") && !refused.stdout.contains("secret"), "\(refused.stderr)")
        }
        // A host that is not this machine's, even with any free port: said in words before a ledger is made.
        let elsewhere = directory.appendingPathComponent("elsewhere.sqlite").path
        let foreignHost = try await CLI.runDetached(["serve", "--config", config, "--database", elsewhere, "--host", "192.0.2.1", "--port", "0"])
        #expect(
            foreignHost.status == 1 && foreignHost.stderr.contains("error: no-such-address: 192.0.2.1 is not an address of this machine"),
            "\(foreignHost.stderr)")
        #expect(!FileManager.default.fileExists(atPath: elsewhere))

        let second = try await CLI.runDetached(["serve", "--config", config, "--database", database, "--port", "0"])
        #expect(second.status == 1)
        #expect(
            second.stderr.contains(
                "error: ledger-in-use: the SQLite ledger \(database) is in use by PID \(first.process.processIdentifier) (storekeeper serve)"),
            "\(second.stderr)")
        // The same file named another way is the same ledger.
        let relative = try await CLI.runDetached([
            "serve", "--config", config, "--database", database.replacingOccurrences(of: "/ledger.sqlite", with: "/./ledger.sqlite"), "--port", "0",
        ])
        #expect(relative.status == 1 && relative.stderr.contains("ledger-in-use"), "\(relative.stderr)")
        // Through a symbolic link to the file, or to its directory: the same ledger, the same lock.
        let link = directory.appendingPathComponent("link.sqlite").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: database)
        let linked = try await CLI.runDetached(["serve", "--config", config, "--database", link, "--port", "0"])
        #expect(linked.status == 1 && linked.stderr.contains("ledger-in-use"), "\(linked.stderr)")
        let linkedDirectory = directory.appendingPathComponent("linked-dir").path
        try FileManager.default.createSymbolicLink(atPath: linkedDirectory, withDestinationPath: directory.path)
        let viaDirectory = try await CLI.runDetached(["serve", "--config", config, "--database", linkedDirectory + "/ledger.sqlite", "--port", "0"])
        #expect(viaDirectory.status == 1 && viaDirectory.stderr.contains("ledger-in-use"), "\(viaDirectory.stderr)")
        // Through a hard link: another name realpath cannot see through, the same file.
        let hardLink = directory.appendingPathComponent("hard.sqlite").path
        try FileManager.default.linkItem(atPath: database, toPath: hardLink)
        let hard = try await CLI.runDetached(["serve", "--config", config, "--database", hardLink, "--port", "0"])
        #expect(hard.status == 1 && hard.stderr.contains("ledger-in-use") && hard.stderr.contains("hard link"), "\(hard.stderr)")
        // `copy` needs the server stopped, and says so.
        let copy = try await CLI.runDetached(["copy", "--from", database, "--to", "postgres://nobody@127.0.0.1:9/none"])
        #expect(copy.status == 1 && copy.stderr.contains("ledger-in-use"), "\(copy.stderr)")

        // Once the first is gone (even killed), the next one starts on the ledger it made, and says nothing of creating one.
        first.stop()
        let again = try RunningCommand(["serve", "--config", config, "--database", database, "--port", "0"], in: directory)
        defer { again.stop() }
        _ = try await again.port()
        #expect(!again.stderr.contains("creating a new"), "\(again.stderr)")
    }

    @Test(
        "Ctrl-C stops serve at once while the App Store does not answer (credential check and recovery retrying); the ledger is left whole in its file"
    )
    func stopWhileAppStoreUnreachable() async throws {
        let directory = try CLI.temporaryDirectory("stop-unreachable")
        defer { try? FileManager.default.removeItem(at: directory) }
        let sim = directory.appendingPathComponent("sim").path
        // The configuration's App Store is a port nothing listens on.
        #expect(try await CLI.runDetached(["simulator", "init", sim, "--port", String(try CLI.freePort())]).status == 0)
        let database = directory.appendingPathComponent("ledger.sqlite").path
        let server = try RunningCommand(["serve", "--config", sim + "/storekeeper.json", "--database", database, "--port", "0"], in: directory)
        defer { server.stop() }
        _ = try await server.port()
        // The credential check and the recovery job are calling the App Store now, and retrying.
        try await Task.sleep(for: .seconds(2))
        let interrupted = ContinuousClock.now
        server.signal(SIGINT)
        #expect(try await server.finish(within: 60) == 0, "\(server.stderr)")
        #expect(ContinuousClock.now - interrupted < .seconds(15), "took \(ContinuousClock.now - interrupted) to stop")
        #expect(server.stderr.contains("stopped: every request answered, every job ended, the ledger closed"), "\(server.stderr)")
        let wal = (try? FileManager.default.attributesOfItem(atPath: database + "-wal")[.size] as? Int) ?? 0
        #expect(wal == 0, "\(wal) bytes left in the write-ahead log")
    }

    @Test("simulator run --dir on a directory a running simulator serves is refused naming its PID, and changes nothing")
    func oneSimulatorPerDirectory() async throws {
        let directory = try CLI.temporaryDirectory("one-simulator")
        defer { try? FileManager.default.removeItem(at: directory) }
        let sim = directory.appendingPathComponent("sim").path
        #expect(try await CLI.runDetached(["simulator", "init", sim]).status == 0)
        let served = try RunningCommand(["simulator", "--dir", sim, "--port", "0"], in: directory)
        defer { served.stop() }
        let port = try await served.port()
        let before = try await Self.get("http://127.0.0.1:\(port)/simulator/v1/ground-truth")

        let run = try await CLI.runDetached(["simulator", "run", "--dir", sim, "subscriber-lifecycle"])
        #expect(run.status == 1)
        #expect(
            run.stderr.contains("error: simulator-in-use: the simulator in \(sim) is in use by PID \(served.process.processIdentifier)"),
            "\(run.stderr)")
        #expect(run.stderr.contains("simulator run --url"), "says what to do instead: \(run.stderr)")
        let serveAgain = try await CLI.runDetached(["simulator", "--dir", sim, "--port", "0"])
        #expect(serveAgain.status == 1 && serveAgain.stderr.contains("simulator-in-use"), "\(serveAgain.stderr)")
        #expect(try await Self.get("http://127.0.0.1:\(port)/simulator/v1/ground-truth").body == before.body, "nothing changed")

        // The running simulator plays it instead.
        let viaURL = try await CLI.runDetached(["simulator", "run", "--url", "http://127.0.0.1:\(port)", "subscriber-lifecycle"])
        #expect(viaURL.status == 0, "\(viaURL.stderr)")
        // What the running simulator refuses as the command's mistake is a usage mistake (64), with its reason.
        let url = "http://127.0.0.1:\(port)"
        let twoPlans = try await CLI.runDetached([
            "simulator", "buy", "--url", url, "--customer", "alice", "--product", "pro.monthly", "--quantity", "2",
        ])
        #expect(twoPlans.status == 64 && twoPlans.stderr.contains("simulator-400") && twoPlans.stderr.contains("quantity"), "\(twoPlans.stderr)")
        let nobody = try await CLI.runDetached(["simulator", "buy", "--url", url, "--customer", "nobody", "--product", "pro.monthly"])
        #expect(nobody.status == 64 && nobody.stderr.contains("simulator-404"), "\(nobody.stderr)")
        // An answer with no body says so, rather than ending at the colon.
        let nowhere = try await CLI.runDetached(["simulator", "control", "--url", url, "GET", "/nowhere"])
        #expect(nowhere.status == 64 && nowhere.stderr.contains("simulator-404: the simulator answered GET /nowhere with 404"), "\(nowhere.stderr)")
        // A scenario's step the simulator refuses fails the run (1), as `run --dir` does: the file, not the command line, is wrong.
        let scenario = directory.appendingPathComponent("bad.scenario").path
        try "customer zed\nbuy zed no.such.product\n".write(toFile: scenario, atomically: true, encoding: .utf8)
        let badStep = try await CLI.runDetached(["simulator", "run", "--url", url, scenario])
        #expect(badStep.status == 1 && badStep.stderr.contains("simulator-4"), "\(badStep.stderr)")
        let missing = try await CLI.runDetached(["simulator", "run", "--dir", directory.appendingPathComponent("nope").path, "subscriber-lifecycle"])
        #expect(missing.status == 1 && missing.stderr.contains("no-such-simulator"), "\(missing.stderr)")
        // Stopped (SIGTERM), it says so, and where its state is.
        served.signal(SIGTERM)
        #expect(try await served.finish(within: 30) == 0)
        #expect(served.stdout.contains("App Store simulator stopped; its state is saved in \(sim)"), "\(served.stdout)")
    }

    @Test("config check prints every setting and its source, and refuses a mistyped key with the one meant")
    func configCheck() async throws {
        let directory = try CLI.temporaryDirectory("config-check")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("storekeeper.json").path
        try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}], "customerCache": {"capacity": 0}}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        let good = try await CLI.runDetached(["config", "check", "--config", file])
        #expect(good.status == 0, "\(good.stderr)")
        let lines = good.stdout.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("customerCache.capacity") && $0.contains("0  [file]") }, "\(good.stdout)")
        #expect(lines.contains { $0.hasPrefix("customerCache.maxAgeSeconds") && $0.contains("60  [default]") }, "\(good.stdout)")
        #expect(good.stdout.contains("note: no API keys"))
        let json = try CLI.json(try await CLI.runDetached(["config", "check", "--config", file, "--json"]).stdout)
        #expect(
            (json["settings"] as? [[String: Any]])?.contains { $0["path"] as? String == "recovery.enabled" && $0["source"] as? String == "default" }
                == true)

        try
            #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}], "entitlements": {"productEntitlement": {"pro.monthly": ["pro"]}}}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        for command in [["config", "check"], ["serve", "--port", "0", "--database", directory.appendingPathComponent("l.sqlite").path]] {
            let typo = try await CLI.runDetached(command + ["--config", file])
            #expect(typo.status == 1)
            #expect(
                typo.stderr.contains(#"\#(file):1:91: unknown key "productEntitlement" in entitlements: did you mean "productEntitlements"?"#),
                "\(typo.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("l.sqlite").path), "serve stopped before the ledger")
    }

    @Test(
        "wrong but well-formed App Store Server API credentials: serve starts, says at once that the App Store refused them, in the log, /health and /metrics"
    )
    func refusedCredentials() async throws {
        let directory = try CLI.temporaryDirectory("credentials")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(2, in: directory)
        try await missed.serve { simulatorURL in
            // Another key ID than the simulator's, well formed; recovery off, so that only the check at start can tell.
            var text = try String(contentsOfFile: missed.config, encoding: .utf8)
            let keyId = try #require(text.range(of: #""keyId": ""#).map { text[$0.upperBound...].prefix { $0 != "\"" } })
            text = text.replacingOccurrences(of: #""keyId": "\#(keyId)""#, with: #""keyId": "WRONGKEY01""#)
                .replacingOccurrences(of: #""recovery": {"#, with: #""recovery": {"enabled": false, "#)
            try text.write(toFile: missed.config, atomically: true, encoding: .utf8)
            _ = try SQLiteLedgerStore(path: missed.database)
            let server = try RunningCommand(["serve", "--config", missed.config, "--database", missed.database, "--port", "0"], in: directory)
            defer { server.stop() }
            let port = try await server.port()
            #expect(try await server.waitFor("credentials REFUSED"), "\(server.stderr)")
            #expect(server.stderr.contains("error storekeeper:") && server.stderr.contains("HTTP 401"), "\(server.stderr)")
            let health = try await Self.get("http://127.0.0.1:\(port)/health")
            #expect(
                health.status == 200 && health.body.contains(#""appStoreCredentials":{"com.example.storekeeper (Sandbox)":"refused"}"#),
                "\(health.body)")
            let metrics = try await Self.get("http://127.0.0.1:\(port)/metrics").body
            #expect(
                metrics.contains(#"storekeeper_app_store_credentials_refused{bundle_id="com.example.storekeeper",environment="Sandbox"} 1"#),
                "\(metrics)")
            // config check --online says the same, and exits 1.
            let check = try await CLI.runDetached(["config", "check", "--config", missed.config, "--online"])
            #expect(check.status == 1 && check.stdout.contains("credentials com.example.storekeeper Sandbox: refused"), "\(check.stdout)")
            _ = simulatorURL
        }
    }
}

/// The disk fills up under a running server.
@Suite("storekeeper serve on a full disk")
struct FullDiskTests {
    static func post(_ url: String, _ body: String) async throws -> UInt {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: body))
        return try await HTTPClient.shared.execute(request, timeout: .seconds(30)).status.code
    }

    @Test(
        "writes that do not fit are refused in words (the notification answered 5xx, nothing acknowledged); restarted with room, the ledger is whole and recovery brings every notification back"
    )
    func fullDisk() async throws {
        let directory = try CLI.temporaryDirectory("full-disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        let sim = directory.appendingPathComponent("sim").path
        let database = directory.appendingPathComponent("ledger.sqlite").path
        let (simulatorPort, serverPort) = (try CLI.freePort(), try CLI.freePort())
        #expect(try await CLI.runDetached(["simulator", "init", sim, "--port", String(simulatorPort)]).status == 0)
        let simulator = try RunningCommand(
            ["simulator", "--dir", sim, "--port", String(simulatorPort), "--notify-url", "http://127.0.0.1:\(serverPort)/appstore/notifications"],
            in: directory
        )
        defer { simulator.stop() }
        _ = try await simulator.port()
        // Files of this server may not grow past 600 KB (RLIMIT_FSIZE, with SIGXFSZ ignored: writes fail as on a full disk).
        let limited = try RunningCommand(
            [
                "-c", "trap '' XFSZ; ulimit -f 600; exec \"$0\" serve --config \"$1\" --database \"$2\" --port \"$3\"",
                CLI.binary.path, sim + "/storekeeper.json", database, String(serverPort),
            ],
            in: directory, executable: URL(fileURLWithPath: "/bin/bash")
        )
        _ = try await limited.port()
        let control = "http://127.0.0.1:\(simulatorPort)/simulator/v1"
        for index in 0..<60 {
            #expect(try await Self.post(control + "/customers", #"{"id": "c\#(index)"}"#) == 201)
            #expect(try await Self.post(control + "/purchases", #"{"customerId": "c\#(index)", "productId": "pro.monthly"}"#) == 200)
        }
        #expect(try await limited.waitFor("nothing was acknowledged"), "\(limited.stderr.suffix(2_000))")
        #expect(!limited.stderr.contains("SQLite error"), "\(limited.stderr.suffix(2_000))")
        limited.stop()

        // With room again: the ledger opens (not corrupt), and the recovery job brings back what was refused.
        let server = try RunningCommand(
            ["serve", "--config", sim + "/storekeeper.json", "--database", database, "--port", String(serverPort)], in: directory)
        defer { server.stop() }
        _ = try await server.port()
        #expect(try await server.waitFor("recovery.fetched="), "\(server.stderr.suffix(2_000))")
        server.stop()
        let counts = try await SQLiteLedgerStore(path: database).notificationCounts()
        #expect(counts["applied"] == 60, "\(counts)")
    }
}

/// Files the operator tests make.
enum SQLiteLedgerStoreFixtures {
    /// Another program's SQLite database (one table, `users`); its bytes.
    static func foreignDatabase(at path: String) throws -> Data {
        let python = try ChildProcess(
            "/usr/bin/env",
            ["python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table users(id)'); c.commit(); c.close()", path])
        python.waitUntilExit()
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }
}

enum P256KeyFile {
    /// A new P-256 key as a `.p8` file readable by its owner only.
    static func write(to path: String) throws {
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
    }
}
