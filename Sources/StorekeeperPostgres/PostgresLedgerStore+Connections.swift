import Logging
import PostgresNIO
import StorekeeperCore
import Synchronization

/// How the store uses its connections: a write is a transaction run again after a transient failure, a read one
/// statement on a pooled connection, and neither waits for a connection longer than `connect_timeout`.
extension PostgresLedgerStore {
    /// Runs `body` in a transaction (again from the start after a transient failure), then announces the customers
    /// it says it affected: to the other instances through `NOTIFY` inside the transaction, to this one after commit.
    func write<T: Sendable>(
        _ body: @escaping @Sendable (PostgresWriteTransaction) async throws -> (T, Set<String>)
    ) async throws(StorageError) -> T {
        let maximumAttempts = 8
        var attempt = 0
        while true {
            attempt += 1
            let memo = PostgresHeaders.Memo()
            do {
                // Checked out first, then `BEGIN`: the sweeper must not cancel a write that already has its connection.
                let (result, affected) = try await checkingOut { checkout in
                    try await self.pool.withConnection { connection in
                        guard checkout.checkedOut() else { throw CancellationError() }
                        return try await connection.withTransaction(logger: self.logger) { connection in
                            let transaction = PostgresWriteTransaction(store: self, connection: connection, memo: memo)
                            let (result, affected) = try await body(transaction)
                            // The last writes and the announcement, in one statement.
                            try await transaction.flush(announcing: affected.isEmpty ? nil : self.listener.announcement(affected))
                            return (result, affected)
                        }
                    }
                }
                headers.commit(memo)
                writeFaults.succeeded()
                changes.publish(affected)
                eventsAppended.signal()
                return result
            } catch {
                let cause = Self.cause(of: error)
                if let storage = cause as? StorageError { throw storage }
                guard attempt < maximumAttempts, Self.isTransient(cause) else {
                    if Self.isDatabaseFault(cause) { writeFaults.failed(Self.describe(cause)) }
                    throw StorageError("write failed: \(Self.describe(cause))", underlying: error)
                }
                retries.withLock { $0 += 1 }
                metrics.databaseRetry()
                logger.debug(
                    "write retried after a transient failure",
                    metadata: ["error": .string(Self.describe(cause)), "attempt": .stringConvertible(attempt)])
                // A little random backoff, growing, so that writers that collided do not collide again.
                try? await Task.sleep(for: .milliseconds(Int.random(in: 1...(5 << min(attempt, 6)))))
            }
        }
    }

    /// Whether a write failed because of the database server, not the write itself: what `/health` reports
    /// (``WriteFaults``). A lost or refused connection; SQLSTATE class 08 (connection), 25 (a read-only transaction: a
    /// standby after a fail-over), 53 (insufficient resources: a full disk), 57 (operator intervention), 58 (system
    /// error: I/O) and XX (internal error). A write the server refused for its content (a constraint, bad data) is not.
    static func isDatabaseFault(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        guard let state = error.serverInfo?[.sqlState] else { return true }
        return ["08", "25", "53", "57", "58", "XX"].contains(String(state.prefix(2)))
    }

    /// Serialization failures, deadlocks and lost connections: the transaction did not happen (or, for a connection
    /// lost during `COMMIT`, may have; running it again is harmless, every unit of work being idempotent).
    static func isTransient(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        if let state = error.serverInfo?[.sqlState] {
            return state == "40001" || state == "40P01" || state == "55P03" || state.hasPrefix("08") || state == "57P01"
        }
        return error.code == .serverClosedConnection || error.code == .clientClosedConnection || error.code == .connectionError
    }

    /// What failed in a transaction (its body, its `COMMIT` or its `BEGIN`), or `error` itself when it is not a
    /// transaction's.
    static func cause(of error: any Error) -> any Error {
        (error as? PostgresTransactionError).flatMap { $0.closureError ?? $0.commitError ?? $0.beginError } ?? error
    }

    /// What went wrong, from the server's message and SQLSTATE (postgres-nio's own description hides both, lest a
    /// query's values leak; the server's message names no bound value).
    static func describe(_ error: any Error) -> String {
        guard let error = cause(of: error) as? PSQLError else { return "\(cause(of: error))" }
        if let message = error.serverInfo?[.message] {
            return "\(message) (SQLSTATE \(error.serverInfo?[.sqlState] ?? "?"))"
        }
        if error.code == .sslUnsupported {
            return "the server does not accept TLS, which this sslmode requires (sslmode=disable or prefer connects without it)"
        }
        if error.code == .authMechanismRequiresPassword {
            return
                "the server asks for a password and none was given: put it in the URL, in PGPASSWORD, or in the password file (PGPASSFILE, else ~/.pgpass)"
        }
        if error.code == .connectionError, let underlying = error.underlying {
            // postgres-nio's text lists every attempt in its own types; the reason is what an operator needs.
            let text = "\(underlying)".lowercased()
            if text.contains("refused") { return "cannot connect: connection refused (is PostgreSQL running there, on that port?)" }
            if text.contains("timed out") || text.contains("timeout") { return "cannot connect: timed out (a firewall, or the wrong host?)" }
            if text.contains("resolve") || text.contains("not known") || text.contains("nodename") {
                return "cannot connect: the host name does not resolve"
            }
            if text.contains("unreachable") { return "cannot connect: the network or host is unreachable" }
            return "cannot connect: \(String("\(underlying)".prefix(200)))"
        }
        if let underlying = error.underlying { return "\(error.code): \(underlying)" }
        return "\(error.code)"
    }

    /// Runs `operation`, which checkouts a pooled connection and calls `checkedOut()` on the checkout it is given once it has
    /// one; fails it with a ``StorageError`` when it has none after the URL's `connect_timeout`, instead of waiting for
    /// one without end (``PostgresCheckoutWatch``). When the database stops answering (stopped, unreachable),
    /// postgres-nio keeps a checkout request waiting while it tries to connect again; a request then hung until the
    /// server's response timeout closed its connection without an answer (60 s, seen by stopping PostgreSQL under a
    /// running `serve`). Now it gets a 503 (a notification: a 5xx, which Apple retries) after `connect_timeout`.
    func checkingOut<T: Sendable>(_ operation: @escaping @Sendable (PostgresCheckoutWatch.Checkout) async throws -> T) async throws -> T {
        let timeout = checkoutWatch.timeout
        do {
            return try await checkoutWatch.run(operation) {
                StorageError(
                    "no database connection within \(timeout.components.seconds) s (connect_timeout): the database does not answer, or every connection of the pool is busy",
                    underlying: NoConnection()
                )
            }
        } catch {
            // No connection in time, or the pool gave up connecting: the database may be down; once it answers, the
            // pool is renewed rather than left to its backoff (``PostgresPool``).
            if (error as? StorageError)?.underlying is NoConnection || Self.isConnectionFailure(Self.cause(of: error)) {
                pool.noteFailure()
            }
            throw error
        }
    }

    /// A connection that could not be made or was lost (not a statement the server refused).
    static func isConnectionFailure(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.serverInfo == nil else { return false }
        return error.code == .serverClosedConnection || error.code == .connectionError
    }

    /// Why a checkout timed out (not a failure of any one request: a batch that gets it is not read again one by one).
    struct NoConnection: Error {}

    /// Runs `body` on a pooled connection, outside any transaction: each statement sees what was committed when it
    /// began, which is why every read that must be consistent is one statement (``loadCustomers``, ``loadFamilies``).
    func read<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws(StorageError) -> T {
        do {
            return try await checkingOut { checkout in
                try await self.pool.withConnection { connection in
                    guard checkout.checkedOut() else { throw CancellationError() }
                    return try await body(connection)
                }
            }
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError("read failed: \(Self.describe(error))", underlying: error)
        }
    }
}
