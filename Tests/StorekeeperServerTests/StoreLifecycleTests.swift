import Foundation
import Logging
import ServiceLifecycle
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: the store's life in the service group")
struct StoreLifecycleTests {
    @Test("an application that owns its store closes it once, after the server has stopped, on a graceful shutdown")
    func storeClosedLast() async throws {
        let testbed = try ServerTestbed()
        let events = Collected<String>()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let ports = AsyncStream<Int>.makeStream()
        let app = StorekeeperApplication.buildApplication(
            store: testbed.store, configuration: testbed.configuration, verifiers: try testbed.configuration.makeVerifiers(), port: 0,
            logger: logger, ownsStore: true, afterStoreClosed: { events.add("store closed") },
            onServerRunning: { ports.continuation.yield($0) }
        )
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let port = try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            let connection = try RawConnection(port: port)
            connection.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(await connection.receive(until: #""status":"ok""#, within: 30).contains("200 OK"))
            #expect(events.values.isEmpty, "the store was closed while the server ran")
            await group.triggerGracefulShutdown()
            try await tasks.next()
            events.add("group ended")
            return port
        }
        #expect(events.values == ["store closed", "group ended"])
        // SQLite: every commit is in the file itself; the write-ahead log is gone or empty.
        let wal = (try? FileManager.default.attributesOfItem(atPath: testbed.store.path + "-wal")[.size] as? Int) ?? 0
        #expect(wal == 0, "a closed ledger left \(wal) bytes in its write-ahead log")
        // Stopped: nothing listens on the port any more.
        #expect(throws: (any Error).self) { try RawConnection(port: port) }
    }
}
