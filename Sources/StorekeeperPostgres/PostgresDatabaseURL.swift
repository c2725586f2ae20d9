import AppStoreModels
import Foundation
import NIOSSL
package import PostgresNIO
package import StorekeeperCore

/// Where a PostgreSQL ledger is, from a `postgres://` (or `postgresql://`) URL as libpq writes them:
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?OPTION=VALUE&…]`, the user, password and database
/// percent-encoded. Options: `sslmode` (`disable`, `prefer` (the default, as libpq's), `require` (encrypted, the
/// server's certificate not checked, as libpq's), `verify-full` (encrypted, certificate and host name checked)),
/// `pool_size` (connections per instance, default 20, at least 2: one listens for the other instances' writes; each opened
/// on demand, closed after 60 s idle: see `minimumConnections`), `connect_timeout` (seconds, default 10),
/// `statement_timeout` (seconds a statement of a read or a write may run, waits for locks included, before
/// PostgreSQL cancels it; default 0: the server's or the role's setting; migrations are never bounded), `write_concurrency`
/// (batches of live notifications written at once per instance, default 4), `write_batch` (the most notifications
/// in one batch, default 32; 1 turns batching off), `read_concurrency` and `read_batch` (the same for customer reads,
/// read in one statement per batch; defaults 4 and 32): see `Batcher`; `keepalive` (seconds between pings of an
/// idle pooled connection, default 30; 0: none, see ``keepAlive``). The password never appears in
/// ``description`` (``redacted``), in logs or in errors.
package struct PostgresDatabaseURL: Sendable, CustomStringConvertible {
    package enum TLSMode: String, Sendable, CaseIterable {
        case disable, prefer, require
        case verifyFull = "verify-full"
    }

    package var host: String
    package var port: Int
    package var username: String
    package var password: String?
    package var database: String
    package var tlsMode: TLSMode = .prefer
    package var poolSize = 20
    package var connectTimeout: Duration = .seconds(10)
    /// How long a statement of a read or a write may run before PostgreSQL cancels it (`statement_timeout`; a lock
    /// held by a stuck client then costs a request seconds, not an HTTP timeout); 0 (the default): whatever the
    /// server or the role says. Sent as a startup parameter, which pgBouncer refuses: behind it, set the role's
    /// (`ALTER ROLE … SET statement_timeout = '30s'`) instead.
    package var statementTimeout: Duration = .zero
    /// How many batches of live notifications an instance writes at once (`Batcher/workers`); a writer beyond the
    /// first starts only when enough notifications wait (`PostgresLedgerStore.writeGathering`).
    package var writeConcurrency = 4
    /// The most live notifications in one transaction (`Batcher/maximumBatch`); 1: each alone.
    package var writeBatch = 32
    /// How many statements of customer reads an instance runs at once (`Batcher/workers`).
    package var readConcurrency = 4
    /// The most customer reads in one statement (`Batcher/maximumBatch`); 1: each alone.
    package var readBatch = 32
    /// How often an idle pooled connection is pinged (`SELECT 1`), so that a connection a firewall or a NAT dropped
    /// while idle is found before a request uses it, and the network keeps the idle ones open; `nil` (`keepalive=0`):
    /// never. postgres-nio arms a timer each time a connection goes back to the pool for this, which costs CPU on
    /// every read and write under load (Benchmarks/History.md, eighth round): a database on the same host or the same
    /// network, with nothing in between that drops idle connections, can do without.
    package var keepAlive: Duration? = .seconds(30)

    /// How many connections postgres-nio's pool keeps open even when idle: none. Every connection is opened on demand
    /// and closed after 60 s idle. A minimum above 0 (the former `pool_min`) can crash `serve` when the database comes
    /// back after an outage: postgres-nio 1.33.2's pool checks
    /// `precondition(minimumConcurrentConnections <= stats.active)` before opening a connection for a waiting
    /// request, and `active` leaves out the connections still closing, so a request queued while the dead
    /// connections close fails it (any connection closing under load with requests waiting could). With no minimum
    /// the check cannot fail. Its cost, an idle timer armed each time a connection goes back to the pool, is within
    /// the run-to-run spread (Benchmarks/History.md, eleventh round).
    static let minimumConnections = 0

    /// Whether `text` names a PostgreSQL database (anything else given to `--database` is a SQLite file path).
    package static func isPostgres(_ text: String) -> Bool {
        // A URL's scheme is case-insensitive (RFC 3986).
        let lowered = text.prefix(13).lowercased()
        return lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://")
    }

    /// Parses `text`; the error names what is wrong, never the password. A URL without a password takes it from
    /// `environment` as libpq would: `PGPASSWORD`, else the password file (``PostgresPasswordFile``), so that it need
    /// not be on the command line.
    package init(_ text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(StorageError) {
        guard Self.isPostgres(text) else {
            throw StorageError("the database URL is not a postgres:// URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE)")
        }
        guard let components = URLComponents(string: text) else {
            throw StorageError(
                "the database URL cannot be read as a URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE): a port that is not a number, "
                    + "or a character of the user name or password that must be %-escaped (/ as %2F, @ as %40, # as %23, ? as %3F, % as %25)")
        }
        guard let host = components.host, !host.isEmpty else { throw StorageError("the database URL has no host") }
        guard let encodedUser = components.percentEncodedUser, !encodedUser.isEmpty else {
            throw StorageError("the database URL has no user name (postgres://USER@HOST/DATABASE)")
        }
        // Foundation escapes a malformed escape's `%` itself (`%zz` would be a password of `%zz`, refused by the server
        // as wrong); libpq refuses it: so do we, naming the part, not its text.
        let (rawUser, rawPassword) = Self.userInfo(text)
        for (part, raw) in [("user name", rawUser), ("password", rawPassword)] where raw.map({ $0.removingPercentEncoding == nil }) == true {
            throw StorageError("the database URL's \(part) has a malformed %-escape, or one that is not UTF-8 (a % in it is written %25)")
        }
        let user = encodedUser.removingPercentEncoding ?? encodedUser
        let encodedPassword = components.percentEncodedPassword
        let path = components.percentEncodedPath.removingPercentEncoding ?? ""
        let database = path.hasPrefix("/") ? String(path.dropFirst()) : path
        guard !database.isEmpty, !database.contains("/") else { throw StorageError("the database URL names no database (…@HOST:PORT/DATABASE)") }
        if let port = components.port, !(1...65_535).contains(port) { throw StorageError("the database URL's port must be 1 to 65535, not \(port)") }
        // An IPv6 address is bracketed in a URL (`[::1]`), not in a socket address.
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.port = components.port ?? 5432
        self.username = user
        self.password = encodedPassword?.removingPercentEncoding
        self.database = database
        var given: Set<String> = []
        for item in components.queryItems ?? [] {
            let value = item.value ?? ""
            guard given.insert(item.name).inserted else {
                throw StorageError("the database URL gives option \(UntrustedText.escaped(item.name, limit: 40)) twice")
            }
            switch item.name {
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else {
                    throw StorageError(
                        "sslmode must be one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", ")), not \(UntrustedText.escaped(value, limit: 40))"
                    )
                }
                tlsMode = mode
            case "pool_size":
                // One connection is held for good by the listener that hears other instances' writes.
                poolSize = try Self.count(item.name, value, 2...500)
            case "pool_min":
                throw StorageError(
                    "pool_min is no longer accepted: every connection is opened on demand (postgres-nio's pool could crash with a minimum when the database came back after an outage); remove it from the URL"
                )
            case "connect_timeout":
                guard let seconds = Int(value), (1...600).contains(seconds) else {
                    throw StorageError("connect_timeout must be 1 to 600 seconds, not \(UntrustedText.escaped(value, limit: 40))")
                }
                connectTimeout = .seconds(seconds)
            case "statement_timeout": statementTimeout = .seconds(try Self.count(item.name, value, 0...3_600))
            case "write_concurrency": writeConcurrency = try Self.count(item.name, value, 1...100)
            case "write_batch": writeBatch = try Self.count(item.name, value, 1...1_000)
            case "read_concurrency": readConcurrency = try Self.count(item.name, value, 1...100)
            case "read_batch": readBatch = try Self.count(item.name, value, 1...1_000)
            case "keepalive":
                let seconds = try Self.count(item.name, value, 0...3_600)
                keepAlive = seconds == 0 ? nil : .seconds(seconds)
            default:
                throw StorageError(
                    "unknown database URL option \(UntrustedText.escaped(item.name, limit: 40)) (known: sslmode, pool_size, connect_timeout, statement_timeout, write_concurrency, write_batch, read_concurrency, read_batch, keepalive)"
                )
            }
        }
        if password == nil { password = try PostgresPasswordFile.password(for: self, environment: environment) }
    }

    /// The user and password of a URL's authority, as written (escapes not decoded: a malformed one, or one
    /// that is not UTF-8, makes `removingPercentEncoding` nil).
    private static func userInfo(_ text: String) -> (user: Substring?, password: Substring?) {
        guard let scheme = text.range(of: "://") else { return (nil, nil) }
        let authority = text[scheme.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard let at = authority.lastIndex(of: "@") else { return (nil, nil) }
        let info = authority[..<at]
        guard let colon = info.firstIndex(of: ":") else { return (info, nil) }
        return (info[..<colon], info[info.index(after: colon)...])
    }

    /// An option's whole number, refused (named, with the value escaped) outside `range`.
    private static func count(_ name: String, _ value: String, _ range: ClosedRange<Int>) throws(StorageError) -> Int {
        guard let count = Int(value), range.contains(count) else {
            throw StorageError("\(name) must be \(range.lowerBound) to \(range.upperBound), not \(UntrustedText.escaped(value, limit: 40))")
        }
        return count
    }

    /// The URL without its password.
    package var redacted: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        var text = "postgres://\(username)\(password == nil ? "" : ":***")@\(shownHost):\(port)/\(database)"
        var options: [String] = []
        if tlsMode != .prefer { options.append("sslmode=\(tlsMode.rawValue)") }
        if poolSize != 20 { options.append("pool_size=\(poolSize)") }
        if connectTimeout != .seconds(10) { options.append("connect_timeout=\(connectTimeout.components.seconds)") }
        if statementTimeout != .zero { options.append("statement_timeout=\(statementTimeout.components.seconds)") }
        if writeConcurrency != 4 { options.append("write_concurrency=\(writeConcurrency)") }
        if writeBatch != 32 { options.append("write_batch=\(writeBatch)") }
        if readConcurrency != 4 { options.append("read_concurrency=\(readConcurrency)") }
        if readBatch != 32 { options.append("read_batch=\(readBatch)") }
        if keepAlive != .seconds(30) { options.append("keepalive=\(keepAlive?.components.seconds ?? 0)") }
        if !options.isEmpty { text += "?" + options.joined(separator: "&") }
        return text
    }

    package var description: String { redacted }

    /// The client configuration postgres-nio takes.
    func clientConfiguration() throws(StorageError) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch tlsMode {
        case .disable:
            tls = .disable
        case .prefer:
            tls = .prefer(Self.unverifiedTLS)
        case .require:
            tls = .require(Self.unverifiedTLS)
        case .verifyFull:
            tls = .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls
        )
        configuration.options.maximumConnections = poolSize
        configuration.options.minimumConnections = Self.minimumConnections
        configuration.options.keepAliveBehavior = keepAlive.map { .init(frequency: $0) }
        configuration.options.connectTimeout = connectTimeout
        configuration.options.additionalStartupParameters = startupParameters
        return configuration
    }

    /// `statement_timeout` when one is set, nothing by default: pgBouncer refuses a startup parameter it does not
    /// know. The store's first connection sends the same, so that a server refusing them stops the store at once
    /// with its reason (the pool would retry without end); it migrates with no limit (``PostgresSchema``).
    private var startupParameters: [(String, String)] {
        statementTimeout == .zero ? [] : [("statement_timeout", "\(statementTimeout.components.seconds)s")]
    }

    /// One connection's configuration (the store opens one first, to migrate and to report at once why it cannot
    /// connect, where the pool would retry without end).
    func connectionConfiguration() throws(StorageError) -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        do {
            switch tlsMode {
            case .disable: tls = .disable
            case .prefer: tls = .prefer(try NIOSSLContext(configuration: Self.unverifiedTLS))
            case .require: tls = .require(try NIOSSLContext(configuration: Self.unverifiedTLS))
            case .verifyFull: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            }
        } catch {
            throw StorageError("cannot set up TLS for \(redacted): \(error)")
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls
        )
        let seconds = connectTimeout.components.seconds
        configuration.options.connectTimeout = .seconds(seconds)
        configuration.options.additionalStartupParameters = startupParameters
        return configuration
    }

    /// The client configuration, for tests that need their own client (creating databases).
    package func clientConfigurationForTests() throws(StorageError) -> PostgresClient.Configuration {
        try clientConfiguration()
    }

    /// libpq's `prefer` and `require` encrypt without checking the server's certificate.
    private static var unverifiedTLS: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .none
        return configuration
    }
}

extension PostgresDatabaseURL {
    /// Creates a database named `name` (letters, digits and `_` only) on this URL's server, connecting to this URL's
    /// database to do so (the user needs `CREATEDB`), and returns its URL. For tests, and for a `storekeeper copy`
    /// target.
    package func creatingDatabase(named name: String) async throws(StorageError) -> PostgresDatabaseURL {
        try Self.checkName(name)
        try await runMaintenance("CREATE DATABASE \(name)", doing: "create database \(name)")
        var created = self
        created.database = name
        return created
    }
}

extension PostgresDatabaseURL {
    /// Drops this URL's database (a name ``creatingDatabase(named:)`` accepts), connecting to the server's `postgres`
    /// database. No connection may be open on it, unless `closingConnections` (PostgreSQL's `FORCE`: it ends them).
    package func droppingDatabase(closingConnections: Bool = false) async throws(StorageError) {
        try Self.checkName(database)
        var maintenance = self
        maintenance.database = "postgres"
        let sql = "DROP DATABASE IF EXISTS \(database)" + (closingConnections ? " WITH (FORCE)" : "")
        try await maintenance.runMaintenance(sql, doing: "drop database \(database)")
    }

    /// Names this file builds SQL with: lowercase letters, digits and `_` only, never quoted (PostgreSQL folds an
    /// unquoted name to lowercase: `MyLedger` would name `myledger`).
    private static func checkName(_ name: String) throws(StorageError) {
        guard !name.isEmpty, name.count <= 63, name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") }) else {
            throw StorageError("a database name here is 1-63 lowercase ASCII letters, digits and _")
        }
    }

    /// Runs one statement (built from checked names only) on a connection of its own to this URL's database.
    private func runMaintenance(_ sql: String, doing what: String) async throws(StorageError) {
        do {
            let connection = try await PostgresConnection.connect(
                configuration: try connectionConfiguration(), id: 0, logger: PostgresConnection.quiet)
            defer { Task { try? await connection.close() } }
            try await connection.execute(PostgresQuery(unsafeSQL: sql))
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError("cannot \(what) on \(redacted): \(PostgresLedgerStore.describe(error))")
        }
    }
}
