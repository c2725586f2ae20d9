import AppStoreModels
import AppStoreSigning
import Crypto
import Foundation
import Glibc
import StorekeeperSQLite
import StorekeeperTesting
import SwiftASN1
import Testing
import X509

/// Runs the built `storekeeper` binary as a user would.
struct CLI {
    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static var binary: URL {
        // The test bundle sits in the same build folder as the executable.
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return bundle.appendingPathComponent("storekeeper")
    }

    static var corpus: URL { SharedCorpus.appleSigned }

    /// Runs the binary to its end, its input `stdin` (or nothing), waiting on a thread of its own so that Swift's
    /// concurrency pool stays free for an in-process server the same test runs.
    static func runDetached(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) async throws -> Output {
        let result = try await ChildProcess.run(binary.path, arguments, environment: environment, input: Data((stdin ?? "").utf8))
        return Output(
            status: result.termination.status, stdout: String(decoding: result.output, as: UTF8.self),
            stderr: String(decoding: result.error, as: UTF8.self))
    }

    /// Starts the binary with `arguments` (a server), its error output discarded, and reads the first line it writes,
    /// which names its port (`… http://127.0.0.1:PORT …`). Blocks until that line comes: call it off Swift's
    /// concurrency threads (`Task.detached` is enough for a line a server writes at once).
    static func startReportingPort(_ arguments: [String]) throws -> (ChildProcess, port: Int) {
        let child = try ChildProcess(binary.path, arguments, output: .pipe)
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")), let chunk = child.output?.availableData, !chunk.isEmpty { line.append(chunk) }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "127.0.0.1:"), let port = Int(text[range.upperBound...].prefix { $0.isNumber }) else {
            child.kill()
            throw ServerProcess.CLIError(message: "storekeeper \(arguments.first ?? "") did not report its port: \(text)")
        }
        return (child, port)
    }

    /// A new empty folder under the temporary directory.
    static func temporaryDirectory(_ name: String) throws -> URL {
        let directory = TestFiles.directory.appendingPathComponent("\(name)-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A TCP socket bound to a port the OS chose on 127.0.0.1 (listening, if asked), and the port.
    static func loopbackSocket(listening: Bool) throws -> (socket: Int32, port: Int) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(socket, raw, length) == 0 && (!listening || listen(socket, 1) == 0) && getsockname(socket, raw, &length) == 0
            }
        }
        guard bound else {
            close(socket)
            throw ServerProcess.CLIError(message: "cannot bind a loopback port")
        }
        return (socket, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A port nothing listens on now, for a server a test starts on a port it must name.
    static func freePort() throws -> Int {
        let (socket, port) = try loopbackSocket(listening: false)
        close(socket)
        return port
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }
}

@Suite("storekeeper CLI")
struct CLITests {
    @Test("verify prints the verified notification with nested data decoded in place, and exits 0")
    func verifyNotification() async throws {
        let file = CLI.corpus.appendingPathComponent("notification-DID_RENEW-sandbox-03.jws").path
        let output = try await CLI.runDetached([
            "verify", "--environment", "Sandbox", "--bundle-id", "com.loki-project.loki-messenger", "@\(file)",
        ])
        #expect(output.status == 0, "\(output.stderr)")
        let json = try CLI.json(output.stdout)
        #expect(json["verified"] as? Bool == true)
        #expect(json["kind"] as? String == "notification")
        let checks = try #require(json["checks"] as? [String: String])
        #expect(checks["bundleId"] == "checked: com.loki-project.loki-messenger")
        #expect(checks["environment"] == "checked: Sandbox")
        #expect(checks["appAppleId"]?.hasPrefix("not checked") == true)
        let payload = try #require(json["payload"] as? [String: Any])
        #expect(payload["notificationType"] as? String == "DID_RENEW")
        let data = try #require(payload["data"] as? [String: Any])
        let transaction = try #require(data["signedTransactionInfo"] as? [String: Any])
        #expect(transaction["transactionId"] as? String == "2000001024998954")
        let renewal = try #require(data["signedRenewalInfo"] as? [String: Any])
        #expect(renewal["autoRenewStatus"] as? Int == 1)
    }

    @Test("verify says which checks it skipped, reads standard input, and honours --at")
    func verifySkipsAndStdin() async throws {
        let jws = try String(contentsOf: CLI.corpus.appendingPathComponent("notification-DID_RENEW-sandbox-01.jws"), encoding: .utf8)
        let now = try await CLI.runDetached(["verify", "-"], stdin: jws + "\n")
        #expect(now.status == 1)
        #expect(now.stderr.hasPrefix("error: certificate-expired: "))
        #expect(now.stderr.contains("no signedDate"))
        let then = try await CLI.runDetached(["verify", "--at", "2022-03-04T09:43:28Z", "-"], stdin: jws)
        #expect(then.status == 0, "\(then.stderr)")
        let checks = try #require(try CLI.json(then.stdout)["checks"] as? [String: String])
        #expect(checks["bundleId"] == "not checked (no --bundle-id)")
        #expect(checks["environment"] == "not checked (no --environment)")
        #expect(checks["certificateChain"]?.contains("2022-03-04T09:43:28Z") == true)
    }

    @Test(
        "verify failures print error: <code>: <message> and exit 1 (64 for an option it refuses)",
        arguments: [
            (["negative-tampered-payload-01.jws"], "error: invalid-signature: "),
            (["--bundle-id", "com.other", "transaction-consumable-production-01.jws"], "error: bundle-id-mismatch: "),
            (["--environment", "Production", "transaction-autorenew-sandbox-01.jws"], "error: environment-mismatch: "),
            (["negative-truncated-payload-01.jws"], "error: malformed-jws: "),
            (["--at", "yesterday", "transaction-autorenew-sandbox-01.jws"], "error: invalid-option: "),
            (["--root", "/nonexistent.cer", "transaction-autorenew-sandbox-01.jws"], "error: unreadable-input: "),
        ])
    func verifyFailures(arguments: [String], prefix: String) async throws {
        var arguments = arguments
        arguments[arguments.count - 1] = "@" + CLI.corpus.appendingPathComponent(arguments[arguments.count - 1]).path
        let output = try await CLI.runDetached(["verify"] + arguments)
        #expect(output.status == (prefix.hasPrefix("error: invalid-option") ? 64 : 1), "\(output.status)")
        #expect(output.stderr.hasPrefix(prefix), "\(output.stderr)")
        #expect(output.stdout.isEmpty)
    }

    @Test("verify with --root trusts only the given roots")
    func customRoot() async throws {
        let authority = try TestCertificateAuthority.generate()
        let signer = try authority.makeSigner()
        var renewal = RenewalInfoFixture.make()
        renewal.environment = .sandbox
        let jws = try signer.sign(renewal)
        let rootFile = TestFiles.directory.appendingPathComponent("root-\(UUID()).pem")
        try authority.rootCertificate.serializeAsPEM().pemString.write(to: rootFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: rootFile) }
        let trusted = try await CLI.runDetached(["verify", "--root", rootFile.path, "--environment", "sandbox", jws])
        #expect(trusted.status == 0, "\(trusted.stderr)")
        #expect(try CLI.json(trusted.stdout)["kind"] as? String == "renewal-info")
        let untrusted = try await CLI.runDetached(["verify", jws])
        #expect(untrusted.stderr.hasPrefix("error: untrusted-root: "))
    }

    @Test("decode prints header and payload marked unverified, even for a tampered JWS")
    func decode() async throws {
        let file = CLI.corpus.appendingPathComponent("negative-tampered-payload-01.jws").path
        let output = try await CLI.runDetached(["decode", "@\(file)"])
        #expect(output.status == 0)
        let json = try CLI.json(output.stdout)
        #expect(json["verified"] as? Bool == false)
        #expect((json["warning"] as? String)?.hasPrefix("UNVERIFIED") == true)
        #expect((json["header"] as? [String: Any])?["alg"] as? String == "ES256")
        #expect((json["payload"] as? [String: Any])?["productId"] as? String == "com.getsession.org.pro_sub")
        let bad = try await CLI.runDetached(["decode", "not-a-jws"])
        #expect(bad.status == 1)
        #expect(bad.stderr.hasPrefix("error: malformed-jws: "))
    }

    @Test("token prints a JWT signed with the .p8 key, and never echoes the key on failure")
    func token() async throws {
        let key = P256.Signing.PrivateKey()
        let file = TestFiles.directory.appendingPathComponent("AuthKey_TEST\(UUID()).p8")
        try key.pemRepresentation.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        // A key group or others may read is refused, naming the fix.
        let exposed = try await CLI.runDetached([
            "token", "--issuer-id", "57246542-96fe-1a63-e053-0824d011072a", "--key-id", "2X9R4HXF34",
            "--bundle-id", "com.example.app", "--private-key", file.path,
        ])
        #expect(
            exposed.status == 1 && exposed.stderr.hasPrefix("error: exposed-key-file: ") && exposed.stderr.contains("chmod 600"), "\(exposed.stderr)")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        let output = try await CLI.runDetached([
            "token", "--issuer-id", "57246542-96fe-1a63-e053-0824d011072a", "--key-id", "2X9R4HXF34",
            "--bundle-id", "com.example.app", "--private-key", file.path,
        ])
        #expect(output.status == 0, "\(output.stderr)")
        let token = output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = token.split(separator: ".")
        try #require(parts.count == 3)
        let claims = try CLI.json(String(decoding: try #require(Self.base64URL(parts[1])), as: UTF8.self))
        #expect(claims["aud"] as? String == "appstoreconnect-v1")
        #expect(claims["bid"] as? String == "com.example.app")
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Self.base64URL(parts[2])))
        #expect(key.publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))

        let broken = key.pemRepresentation.replacingOccurrences(of: "M", with: "N")
        try broken.write(to: file, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        let failed = try await CLI.runDetached([
            "token", "--issuer-id", "57246542-96fe-1a63-e053-0824d011072a", "--key-id", "k", "--bundle-id", "b", "--private-key", file.path,
        ])
        #expect(failed.status == 1)
        #expect(failed.stderr.hasPrefix("error: invalid-private-key: "))
        let body = broken.split(separator: "\n")[1]
        #expect(!failed.stderr.contains(body.prefix(12)))
    }

    @Test("a port outside 0-65535 is refused by serve and simulator serve (it used to wrap around to another port)")
    func portRange() async throws {
        for arguments in [["serve", "--config", "unused.json", "--port", "99999"], ["simulator", "serve", "--dir", "unused", "--port", "65536"]] {
            let output = try await CLI.runDetached(arguments)
            #expect(output.status == 64, "\(arguments)")
            #expect(output.stderr.contains("--port must be 0 to 65535 (0: any free port), not \(arguments.last!)"), "\(output.stderr)")
        }
    }

    @Test("serve on a port already in use says where it could not serve, and exits 1")
    func servePortInUse() async throws {
        let directory = try CLI.temporaryDirectory("serve")
        let config = directory.appendingPathComponent("config.json").path
        try #"{"apps": [{"bundleId": "com.example.storekeeper", "environments": ["Sandbox"], "trustedRoots": ["apple"]}]}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        // A listening socket on a port the OS chooses, held for the duration of the test.
        let (socket, port) = try CLI.loopbackSocket(listening: true)
        defer { close(socket) }
        let output = try await CLI.runDetached([
            "serve", "--config", config, "--port", String(port), "--database", directory.appendingPathComponent("l.sqlite").path,
        ])
        #expect(output.status == 1)
        #expect(output.stderr.contains("\nerror: port-in-use: port \(port) on 127.0.0.1 is in use by another process"), "\(output.stderr)")
        // Said before anything else happened: the ledger was never created, let alone migrated.
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("l.sqlite").path))
    }

    @Test("backup copies a ledger and prints what the copy holds; it never overwrites a file")
    func backup() async throws {
        let directory = try CLI.temporaryDirectory("backup")
        let database = directory.appendingPathComponent("storekeeper.sqlite").path
        let copy = directory.appendingPathComponent("copy.sqlite").path
        let created = try SQLiteLedgerStore(path: database).migrationsApplied
        let output = try await CLI.runDetached(["backup", "--database", database, "--to", copy])
        #expect(output.status == 0, "\(output.stderr)")
        let json = try CLI.json(output.stdout)
        #expect(json["notifications"] as? Int == 0)
        #expect(json["migrations"] as? [String] == created)
        #expect(try SQLiteLedgerStore(path: copy).migrationsApplied.isEmpty)
        let again = try await CLI.runDetached(["backup", "--database", database, "--to", copy])
        #expect(again.status == 1)
        #expect(again.stderr == "error: storage: \(copy) already exists; a backup never overwrites a file\n")
    }

    @Test("bench verify prints one JSON object with the four verification rates and the two decode rates")
    func benchVerify() async throws {
        let output = try await CLI.runDetached(["bench", "verify", "--seconds", "0.05"])
        #expect(output.status == 0, "\(output.stderr)")
        let json = try CLI.json(output.stdout)
        for key in [
            "outerNotificationWarmCache", "outerNotificationNoCache", "fullNotificationWarmCache", "rawP256Verify",
            "storedPayloadPairDecodeJSONDecoder", "storedPayloadPairDecodeFast",
        ] {
            #expect((json[key] as? Double ?? 0) > 0, "\(key)")
        }
        #expect(json["warmCacheToRawRatio"] is Double)
    }

    @Test("bench ingest and bench entitlements print throughput and latency for both runs, with no failures")
    func serverBenchmarks() async throws {
        for arguments in [
            ["bench", "ingest", "--count", "60", "--concurrency", "4"],
            ["bench", "entitlements", "--count", "200", "--customers", "20", "--concurrency", "4"],
        ] {
            let output = try await CLI.runDetached(arguments)
            #expect(output.status == 0, "\(output.stderr)")
            let json = try CLI.json(output.stdout)
            for run in ["fullSpeed", "halfRate"] {
                let figures = try #require(json[run] as? [String: Any])
                #expect((figures["throughput"] as? Double ?? 0) > 0)
                #expect(figures["failures"] as? Int == 0)
                #expect(figures["p99Milliseconds"] is Double)
            }
        }
    }

    @Test("bench events --pairs turns one server's outbox on and off in turns: events only while it is on, a cost for each pair")
    func interleavedEventsBenchmark() async throws {
        let output = try await CLI.runDetached([
            "bench", "events", "--count", "20", "--rounds", "0", "--pairs", "2", "--concurrency", "4", "--no-delivery",
        ])
        #expect(output.status == 0, "\(output.stderr)")
        let json = try CLI.json(output.stdout)
        let interleaved = try #require(json["interleaved"] as? [String: Any])
        #expect(interleaved["pairs"] as? Int == 2)
        #expect((interleaved["ingestOutboxOn"] as? [Double])?.count == 2)
        #expect((interleaved["ingestOutboxOff"] as? [Double])?.allSatisfy { $0 > 0 } == true)
        #expect((interleaved["outboxCostPercentByPair"] as? [Double])?.count == 2)
        // Every notification is a new customer's first purchase: one event each while the outbox is on, none while off.
        #expect(interleaved["eventsPerNotificationOutboxOn"] as? Double == 1)
        #expect(interleaved["eventsOutboxOff"] as? Int == 0)
        #expect(json["delivery"] == nil)
        // The rounds' figures are absent, not zero, when no round ran.
        #expect(json["outboxCostPercent"] == nil && json["eventsPerNotification"] == nil && json["ingestOutboxOn"] == nil)
        #expect(json["outboxCostPercentByRound"] == nil && json["notificationsPerCommitOutboxOff"] == nil)
        #expect((json["storage"] as? String)?.hasPrefix("SQLite") == true)
        let refused = try await CLI.runDetached(["bench", "events", "--rounds", "0"])
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("--rounds must be 1 to 20 (0 with --pairs)"), "\(refused.stderr)")
    }

    @Test("bench entitlements reports the cache's hits and misses, writes during the reads, and the miss path")
    func entitlementBenchmarkServerFigures() async throws {
        let output = try await CLI.runDetached([
            "bench", "entitlements", "--count", "200", "--customers", "30", "--concurrency", "4", "--cache-capacity", "10", "--write-rate", "50",
        ])
        #expect(output.status == 0, "\(output.stderr)")
        let server = try #require(try CLI.json(output.stdout)["server"] as? [String: Any])
        // Every read is a hit or a miss: 200 at full speed, 100 at half rate; 30 customers do not fit in 10.
        let hits = try #require(server["cacheHits"] as? Int), misses = try #require(server["cacheMisses"] as? Int)
        #expect(hits + misses == 300 && misses > 0, "\(server)")
        #expect(server["cacheCapacity"] as? Int == 10 && server["writeRate"] as? Double == 50)
        let missPath = try #require(server["missPath"] as? [String: Double])
        #expect((missPath["ledgerReadMicroseconds"] ?? 0) > 0 && (missPath["answerMicroseconds"] ?? 0) > 0)

        let refused = try await CLI.runDetached(["bench", "entitlements", "--external-load", "1"], environment: ["STOREKEEPER_BENCH_API_KEY": ""])
        #expect(refused.status != 0 && refused.stderr.contains("STOREKEEPER_BENCH_API_KEY"), "\(refused.stderr)")
    }

    @Test("demo runs simulator and server, and every customer matches the ground truth")
    func fullDemo() async throws {
        let output = try await CLI.runDetached(["demo"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("── subscriber-lifecycle"))
        #expect(output.stdout.contains("every customer matches the simulator's ground truth"))
        #expect(!output.stdout.contains("✗"))
        // A demo that succeeded says nothing alarming on its way out (the receiver's cancellation once logged errors).
        #expect(!output.stderr.contains("error"), "\(output.stderr)")
    }

    @Test("demo --signed-data signs a lifecycle, verifies it, refuses the forgeries and exits 0")
    func demo() async throws {
        let output = try await CLI.runDetached(["demo", "--signed-data"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("✓ SUBSCRIBED/INITIAL_BUY"))
        #expect(output.stdout.contains("✓ EXPIRED/VOLUNTARY"))
        #expect(output.stdout.contains("signed by a look-alike CA: refused, untrusted-root"))
        #expect(output.stdout.contains("all checks passed"))
        #expect(!output.stdout.contains("✗"))
    }

    static func base64URL(_ segment: Substring) -> Data? {
        var text = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        text += String(repeating: "=", count: (4 - text.count % 4) % 4)
        return Data(base64Encoded: text)
    }
}

enum RenewalInfoFixture {
    static func make() -> RenewalInfo {
        var renewal = RenewalInfo(originalTransactionId: "2000000000000009")
        renewal.productId = "pro.yearly"
        renewal.autoRenewProductId = "pro.yearly"
        renewal.autoRenewStatus = .on
        renewal.signedDate = Date()
        return renewal
    }
}
