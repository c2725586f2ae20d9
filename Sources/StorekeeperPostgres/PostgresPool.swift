import Logging
import PostgresNIO
import Synchronization

/// The store's connections: a postgres-nio client, renewed when the database comes back after an outage.
///
/// postgres-nio's pool tries to connect again after failures with a backoff that grows to a minute (100 ms × 1.25ⁿ),
/// and cannot be told to try now: after an outage of a few minutes its next attempt may come a minute after the
/// database is back, and every read and write until then waits `connect_timeout` and fails (an outside test saw
/// `/health` answer 503 after the database was back, and the first read take 7.2 s after a 12 s outage). So when an
/// operation finds no connection (``noteFailure()``), the pool tries a connection of its own every ``probeInterval``;
/// once one connects while the client still has served nothing since the failure, a new client takes the old one's
/// place (the old one is shut down: requests still waiting on it fail, and are answered 503 as before), and the next
/// operation connects at once. A pool whose connections are all busy (one is in use) is never renewed: its requests
/// wait for a connection, not for the database.
final class PostgresPool: Sendable {
    let configuration: PostgresClient.Configuration
    let probeConfiguration: PostgresConnection.Configuration
    let logger: Logger
    /// How often an outage is probed.
    let probeInterval: Duration

    private struct State {
        var client: PostgresClient
        var task: Task<Void, Never>
        /// Operations that had a connection, so far (the probe's evidence that the client recovered by itself).
        var served = 0
        /// Operations holding a connection now: while one does, the pool is busy, not cut off, and is never renewed
        /// under it.
        var inUse = 0
        var probe: Task<Void, Never>?
        var closed = false
    }

    private let state: Mutex<State>
    /// Clients renewed so far (for tests and logs).
    var renewals: Int { renewalCount.withLock { $0 } }
    private let renewalCount = Mutex(0)

    init(configuration: PostgresClient.Configuration, probe: PostgresConnection.Configuration, logger: Logger, probeInterval: Duration = .milliseconds(500)) {
        self.configuration = configuration
        self.probeConfiguration = probe
        self.logger = logger
        self.probeInterval = probeInterval
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        state = Mutex(State(client: client, task: Task { await client.run() }))
    }

    /// The current client.
    var client: PostgresClient { state.withLock { $0.client } }

    /// Runs `body` on a connection of the current client; a connection had counts as the client serving.
    func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let client = self.client
        return try await client.withConnection { connection in
            state.withLock { state in
                state.served &+= 1
                state.inUse += 1
            }
            defer { state.withLock { $0.inUse -= 1 } }
            return try await body(connection)
        }
    }

    /// An operation found no connection in time: probe the database until a connection of the pool's own can be
    /// made, and renew the client if it has not recovered by then.
    func noteFailure() {
        state.withLock { state in
            guard state.probe == nil, !state.closed else { return }
            let servedAtFailure = state.served
            state.probe = Task { [self] in await self.probe(servedAtFailure: servedAtFailure) }
        }
    }

    private func probe(servedAtFailure: Int) async {
        defer { state.withLock { $0.probe = nil } }
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            // Recovered by itself, busy rather than cut off (a connection is in use), or closing: nothing to renew.
            if state.withLock({ $0.served != servedAtFailure || $0.inUse > 0 || $0.closed }) { return }
            do {
                let connection = try await PostgresConnection.connect(configuration: probeConfiguration, id: -attempt, logger: logger)
                try? await connection.close()
            } catch {
                try? await Task.sleep(for: probeInterval)
                continue
            }
            // The database answers; give the client a moment to notice by itself before replacing it.
            try? await Task.sleep(for: .milliseconds(200))
            let old: Task<Void, Never>? = state.withLock { state in
                guard state.served == servedAtFailure, state.inUse == 0, !state.closed else { return nil }
                let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
                let previous = state.task
                state.client = client
                state.task = Task { await client.run() }
                return previous
            }
            guard let old else { return }
            renewalCount.withLock { $0 += 1 }
            logger.notice("the database answers again: its connection pool is renewed, so that requests connect at once")
            old.cancel()
            return
        }
    }

    /// Shuts the client down (and any probe).
    func close() async {
        let (task, probe) = state.withLock { state in
            state.closed = true
            return (state.task, state.probe)
        }
        probe?.cancel()
        await probe?.value
        task.cancel()
        await task.value
    }

    /// Cancels without waiting (deinitialization).
    func cancel() {
        state.withLock { state in
            state.closed = true
            state.probe?.cancel()
            state.task.cancel()
        }
    }
}
