import AppStoreModels
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import Glibc
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

/// The notification relay: every verified notification forwarded, unchanged, to the old backend.
@Suite("Storekeeper server: notification relay")
struct RelayTests {
    typealias T = RecoveryTestbed

    /// An old backend on loopback that fails its first `failures` requests with 500, then records each body.
    final class OldBackend: Sendable {
        let received = Mutex<[[UInt8]]>([])
        let attempts = Mutex(0)
        let failures: Int

        init(failures: Int) { self.failures = failures }

        func serve(_ body: @Sendable @escaping (String) async throws -> Void) async throws {
            let router = Router()
            router.post("/old") { request, _ -> Response in
                let bytes = Array(try await request.body.collect(upTo: 1 << 20).readableBytesView)
                let attempt = self.attempts.withLock { value -> Int in
                    value += 1
                    return value
                }
                if attempt <= self.failures { return Response(status: .internalServerError) }
                self.received.withLock { $0.append(bytes) }
                return Response(status: .ok)
            }
            let ports = AsyncStream<Int>.makeStream()
            let app = Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { ports.continuation.yield($0.localAddress?.port ?? 0) },
                logger: Logger(label: "old", factory: { _ in SwiftLogNoOpLogHandler() }))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await app.runService(gracefulShutdownSignals: []) }
                var iterator = ports.stream.makeAsyncIterator()
                let port = try #require(await iterator.next())
                try await body("http://127.0.0.1:\(port)/old")
                group.cancelAll()
            }
        }
    }

    @Test("every notification Apple sends reaches the old backend byte for byte, through its failures; refused ones are not relayed")
    func relays() async throws {
        let testbed = try await T(environment: .sandbox)
        let old = OldBackend(failures: 2)
        try await old.serve { url in
            var configuration = try testbed.configuration(baseURL: "http://127.0.0.1:9", recovery: .init(enabled: false))
            configuration.apps[0].serverAPI = [:]
            configuration.relay = .init(url: url, timeoutSeconds: 2, maxAttempts: 5)
            try await testbed.withServer(configuration) { base in
                try await testbed.act { (engine) throws(SimulatorError) in
                    try engine.createCustomer(id: "ada")
                    _ = try engine.purchase(.init(customerId: "ada", productId: "pro.monthly"))
                    _ = try engine.purchase(.init(customerId: "ada", productId: "unlock.lifetime"))
                }
                try await testbed.advance(by: 31 * 86_400)
                // A forged notification is refused by the server and never relayed.
                let forged = try await T.call(.POST, base + "/appstore/notifications", key: "", body: #"{"signedPayload":"e30.e30.e30"}"#)
                #expect(forged.status == 400)
                let sent = await testbed.simulator.state.notifications
                #expect(sent.count == 3, "two purchases and a renewal")
                let deadline = ContinuousClock.now + .seconds(30)
                while old.received.withLock({ $0.count }) < sent.count, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                let bodies = old.received.withLock { $0 }
                let payloads = Set(
                    bodies.compactMap { body in
                        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["signedPayload"] as? String
                    })
                #expect(payloads == Set(sent.map(\.signedPayload)), "each notification, unchanged")
                #expect(bodies.count == sent.count, "once each")
                #expect(old.attempts.withLock { $0 } == sent.count + 2, "the two failures were retried")
                // A notification that comes relayed (a relay pointed at this server, or one relaying back) is stored and
                // never relayed again: no loop. The same body unmarked (Apple's retry) is relayed.
                let body = #"{"signedPayload":"\#(sent[0].signedPayload)"}"#
                var marked = HTTPClientRequest(url: base + "/appstore/notifications")
                marked.method = .POST
                marked.headers.add(name: "Storekeeper-Relayed", value: "1")
                marked.body = .bytes(ByteBuffer(string: body))
                let answer = try await HTTPClient.shared.execute(marked, timeout: .seconds(10))
                #expect(answer.status == .ok)
                try await Task.sleep(for: .milliseconds(500))
                #expect(old.received.withLock { $0.count } == sent.count, "a relayed notification was relayed again")
                #expect(try await T.call(.POST, base + "/appstore/notifications", key: "", body: body).status == 200)
                let again = ContinuousClock.now + .seconds(10)
                while old.received.withLock({ $0.count }) == sent.count, ContinuousClock.now < again { try await Task.sleep(for: .milliseconds(50)) }
                #expect(old.received.withLock { $0.count } == sent.count + 1)
            }
        }
    }

    /// A loopback port that takes connections (the kernel completes them) and never answers: a relay target that hangs.
    static func silentListener() throws -> (socket: Int32, port: Int) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(socket, raw, length) == 0 && listen(socket, 64) == 0 && getsockname(socket, raw, &length) == 0
            }
        }
        try #require(bound, "a loopback port")
        return (socket, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test("a relay that hangs (each attempt a minute) never delays or fails the webhook")
    func hangingRelay() async throws {
        let testbed = try await T(environment: .sandbox)
        let (socket, port) = try Self.silentListener()
        defer { close(socket) }
        var configuration = try testbed.configuration(baseURL: "http://127.0.0.1:9", recovery: .init(enabled: false))
        configuration.apps[0].serverAPI = [:]
        configuration.relay = .init(url: "http://127.0.0.1:\(port)/hangs", timeoutSeconds: 60, maxAttempts: 1)
        try await testbed.withServer(configuration) { base in
            let issued = try await T.call(.POST, base + "/v1/customers/bob/app-account-token", key: T.appKey)
            let token = LowercaseUUID(uuidString: try #require(issued.json["appAccountToken"] as? String))
            let started = ContinuousClock.now
            try await testbed.act { (engine) throws(SimulatorError) in
                try engine.createCustomer(id: "bob")
                for _ in 0..<5 { _ = try engine.purchase(.init(customerId: "bob", productId: "coins.100", appAccountToken: token)) }
            }
            // Had the webhook waited for the relay, five deliveries would take five minutes.
            #expect(ContinuousClock.now - started < .seconds(50))
            let notifications = await testbed.simulator.state.notifications
            #expect(notifications.allSatisfy { $0.sendAttempts.last?.sendAttemptResult == "SUCCESS" }, "Apple got 200 for each")
            let customer = try await T.call(.GET, base + "/v1/customers/bob", key: T.appKey)
            #expect((customer.json["consumableBalance"] as? [String: Int])?["coins.100"] == 5)
        }
    }

    @Test("a relay URL that is not http(s), carries a password, or settings out of range are refused at load, named")
    func configuration() throws {
        for (relay, named) in [
            (#"{"url": "ftp://old.example/x"}"#, "relay.url"), (#"{"url": "https://user:pw@old.example/x"}"#, "user or password"),
            (#"{"url": "https://old.example/x", "maxAttempts": 0}"#, "relay.maxAttempts"), (#"{"url": "http://127.0.0.1:99999/x"}"#, "relay.url"),
            (#"{"url": "http://old\u200B.example/x"}"#, "relay.url"),
            (#"{"url": "https://old.example/x", "timeout": 3}"#, "unknown key"),
        ] {
            let directory = TestFiles.directory.appendingPathComponent("relay-config-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let file = directory.appendingPathComponent("config.json").path
            try #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"]}], "relay": \#(relay)}"#.write(
                toFile: file, atomically: true, encoding: .utf8)
            do {
                _ = try ServerConfiguration.load(path: file)
                Issue.record("\(relay) was accepted")
            } catch {
                #expect("\(error)".contains(named), "\(relay): \(error)")
                #expect(!"\(error)".contains("pw@"), "the password is not echoed")
            }
        }
    }
}
