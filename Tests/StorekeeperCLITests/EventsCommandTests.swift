import AppStoreModels
import AppStoreSimulator
import Foundation
import Glibc
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

@Suite("storekeeper events")
struct EventsCommandTests {
    /// A ledger at `path` (left open) where customer alice, by her server-issued token, bought `products`.
    static func ledger(at path: String, products: [String]) async throws -> SQLiteLedgerStore {
        let store = try SQLiteLedgerStore(path: path)
        store.outbox.configure(entitlements: SimulatorFixture.entitlements, clock: { TestAppStore.start })
        var fixture = SimulatorFixture()
        let token = try await store.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        try fixture.customer("apple-1")
        for product in products { _ = try fixture.engine.purchase(.init(customerId: "apple-1", productId: product, appAccountToken: token)) }
        for notification in try await fixture.verifiedNotifications() { _ = try await store.apply(notification) }
        return store
    }

    @Test("list, show and status read a ledger that this process may not write, and change nothing in it")
    func readOnly() async throws {
        let directory = TestFiles.directory.appendingPathComponent("events-read-only-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        let database = directory.appendingPathComponent("ledger.sqlite").path
        let store = try await Self.ledger(at: database, products: ["pro.monthly"])
        // Left open, as a running server leaves it: its write-ahead log beside it.
        let config = directory.appendingPathComponent("config.json").path
        try
            #"{"apps": [{"bundleId": "com.example.storekeeper", "environments": ["Sandbox"]}], "webhooks": [{"name": "b", "url": "http://127.0.0.1:9/", "secret": "\#(WebhookSecret.generate())"}]}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        for file in [database, config] { try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file) }
        let files = [database, database + "-wal", database + "-shm"]
        let before = try files.map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
        let list = try await OperatorErrorTests.runUnprivileged(["events", "list", "--database", database])
        #expect(list.status == 0 && list.stdout.contains(#""type":"subscription.started""#), "\(list.stderr)")
        let id = try #require((try CLI.json(String(list.stdout.split(separator: "\n")[0]))["data"] as? [String: Any])?["id"] as? String)
        let show = try await OperatorErrorTests.runUnprivileged(["events", "show", "--database", database, id])
        #expect(show.status == 0 && show.stdout.contains(id), "\(show.stderr)")
        let status = try await OperatorErrorTests.runUnprivileged(["events", "status", "--database", database, "--config", config])
        #expect(status.status == 0 && status.stdout.contains(#""name" : "b""#), "\(status.stdout)\(status.stderr)")
        // The server's files, byte for byte, and the server still writes.
        #expect(try files.map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == before)
        _ = try await store.appAccountToken(for: "bob", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        await store.close()
        // Without the log's files, in a directory it may not write, reading says what SQLite needs.
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
        let bare = try await OperatorErrorTests.runUnprivileged(["events", "list", "--database", database])
        #expect(getuid() != 0 || (bare.status == 1 && bare.stderr.contains("has no -wal and -shm files beside it")), "\(bare.stderr)")
    }

    @Test(
        "list prints events as webhooks carry them; show prints one with its deliveries; replay and resume act on the configured endpoint; mistakes are named"
    )
    func listShowReplay() async throws {
        let directory = TestFiles.directory.appendingPathComponent("events-cli-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("ledger.sqlite").path
        try await Self.ledger(at: database, products: ["pro.monthly", "unlock.lifetime"]).close()
        let secret = WebhookSecret.generate()
        let previous = WebhookSecret.generate()
        let config = directory.appendingPathComponent("config.json")
        try #"""
        {"apps": [{"bundleId": "com.example.storekeeper", "environments": ["Sandbox"]}],
         "webhooks": [{"name": "backend", "url": "http://127.0.0.1:9/hooks", "secret": "\#(secret)", "previousSecrets": ["\#(previous)"],
                       "eventTypes": ["subscription.started"]}]}
        """#.write(to: config, atomically: true, encoding: .utf8)

        let list = try await CLI.runDetached(["events", "list", "--database", database])
        #expect(list.status == 0, "\(list.stderr)")
        let lines = list.stdout.split(separator: "\n")
        #expect(lines.count == 2)
        let first = try CLI.json(String(try #require(lines.first)))
        #expect(first["type"] as? String == "subscription.started")
        let id = try #require((first["data"] as? [String: Any])?["id"] as? String)
        let typed = try await CLI.runDetached(["events", "list", "--database", database, "--type", "purchase.completed"])
        #expect(typed.stdout.split(separator: "\n").count == 1)

        let replay = try await CLI.runDetached([
            "events", "replay", "--database", database, "--config", config.path, "--endpoint", "backend", "--since", "2020-01-01",
        ])
        #expect(replay.status == 0, "\(replay.stderr)")
        #expect(try CLI.json(replay.stdout)["replayed"] as? Int == 1, "the endpoint takes subscription.started only")
        let show = try await CLI.runDetached(["events", "show", "--database", database, id])
        #expect(show.status == 0, "\(show.stderr)")
        let shown = try CLI.json(show.stdout)
        #expect(((shown["deliveries"] as? [[String: Any]])?.first)?["status"] as? String == "pending")
        let status = try await CLI.runDetached(["events", "status", "--database", database, "--config", config.path])
        #expect(status.status == 0 && status.stdout.contains("\"backlog\" : 1"), "\(status.stdout)\(status.stderr)")
        #expect(!status.stdout.contains(secret) && !replay.stdout.contains(secret) && !replay.stderr.contains(secret))
        // Secrets, current and previous, are masked when the configuration is printed.
        let check = try await CLI.runDetached(["config", "check", "--config", config.path])
        #expect(check.status == 0, "\(check.stderr)")
        #expect(!check.stdout.contains(secret) && !check.stdout.contains(previous) && check.stdout.contains("masked"))
        // Lists left out are listed, with what their absence means.
        #expect(check.stdout.contains("webhooks[0].apps") && check.stdout.contains("every app"), "\(check.stdout)")
        #expect(check.stdout.contains("every environment its apps accept"), "\(check.stdout)")
        // An event the endpoint does not take is not redelivered to it.
        let other = try #require((try CLI.json(String(lines[1]))["data"] as? [String: Any])?["id"] as? String)
        let refused = try await CLI.runDetached([
            "events", "redeliver", "--database", database, "--config", config.path, "--endpoint", "backend", other,
        ])
        #expect(
            refused.status == 64 && refused.stderr.hasPrefix("error: invalid-argument: endpoint 'backend' does not take event"), "\(refused.stderr)")
        // One it takes: the answer names it, as the admin route does.
        let again = try await CLI.runDetached(["events", "redeliver", "--database", database, "--config", config.path, "--endpoint", "backend", id])
        let redelivered = try CLI.json(again.stdout)
        #expect(again.status == 0 && redelivered["redelivered"] as? Int == 1 && redelivered["events"] as? [String] == [id], "\(again.stdout)")

        for (arguments, code) in [
            (["events", "show", "--database", database, "evt_nope"], "invalid-argument"),
            (["events", "list", "--database", database, "--type", "subscription.renewd"], "invalid-option"),
            (["events", "list", "--database", database, "--customer", "a b"], "invalid-option"),
            (
                [
                    "events", "replay", "--database", database, "--config", config.path, "--endpoint", "backend", "--since", "2020-01-01",
                    "--bundle-id",
                    "com.nope",
                ],
                "unknown-app"
            ),
            (
                ["events", "replay", "--database", database, "--config", config.path, "--endpoint", "front", "--since", "2020-01-01"],
                "unknown-endpoint"
            ),
            (["events", "replay", "--database", database, "--config", config.path, "--endpoint", "backend"], "invalid-option"),
            (["events", "list", "--database", directory.appendingPathComponent("none.sqlite").path], "no-such-ledger"),
        ] {
            let output = try await CLI.runDetached(arguments)
            // A refused option or argument, or an app or endpoint the configuration lacks, is a usage mistake (64, as
            // ArgumentParser's); the rest fail (1).
            let status: Int32 = code.hasPrefix("invalid-") || code.hasPrefix("unknown-") ? 64 : 1
            #expect(output.status == status && output.stderr.hasPrefix("error: \(code): "), "\(arguments): \(output.status) \(output.stderr)")
        }
        let mistyped = try await CLI.runDetached(["events", "list", "--database", database, "--type", "subscription.renewd"])
        let nearest = #"--type 'subscription.renewd' is not an event type: did you mean "subscription.renewed"?"#
        #expect(mistyped.stderr.contains(nearest), "\(mistyped.stderr)")
        let secretOutput = try await CLI.runDetached(["events", "secret"])
        #expect(throws: Never.self) { try WebhookSecret(secretOutput.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }
}
