import Foundation
import PostgresNIO
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperPostgres

@Suite("PostgreSQL database URLs")
struct PostgresDatabaseURLTests {
    @Test("a URL's parts and options are read; the password never appears in its description")
    func parsing() throws {
        let url = try PostgresDatabaseURL(
            "postgres://app%40corp:s3cr%3At@db.internal:6432/ledger?sslmode=verify-full&pool_size=8&connect_timeout=3&statement_timeout=15&write_concurrency=2&write_batch=1&read_concurrency=3&read_batch=7"
        )
        #expect(url.username == "app@corp" && url.password == "s3cr:t" && url.host == "db.internal" && url.port == 6432)
        #expect(url.database == "ledger" && url.tlsMode == .verifyFull && url.poolSize == 8)
        #expect(url.connectTimeout == .seconds(3) && url.statementTimeout == .seconds(15))
        #expect(url.writeConcurrency == 2 && url.writeBatch == 1 && url.readConcurrency == 3 && url.readBatch == 7)
        #expect(url.description.hasSuffix("connect_timeout=3&statement_timeout=15&write_concurrency=2&write_batch=1&read_concurrency=3&read_batch=7"))
        #expect(try PostgresDatabaseURL("postgres://u@h/d").statementTimeout == .zero)
        #expect(!url.description.contains("s3cr") && url.description.contains("***"))
        #expect(try PostgresDatabaseURL("postgresql://u@h/d").port == 5432)
    }

    @Test(
        "the pool opens every connection on demand (a minimum crashed postgres-nio 1.33.2's pool after an outage) and pings idle ones every keepalive seconds, never with 0"
    )
    func pool() throws {
        let defaults = try PostgresDatabaseURL("postgres://u@h/d").clientConfiguration().options
        #expect(defaults.maximumConnections == 20 && defaults.minimumConnections == 0)
        #expect(defaults.keepAliveBehavior?.frequency == .seconds(30))
        #expect(
            try PostgresDatabaseURL("postgres://u@h/d?read_concurrency=30&write_concurrency=30").clientConfiguration().options.minimumConnections == 0
        )
        let tuned = try PostgresDatabaseURL("postgres://u@h/d?pool_size=3&keepalive=0")
        let options = try tuned.clientConfiguration().options
        #expect(options.maximumConnections == 3 && options.minimumConnections == 0)
        #expect(options.keepAliveBehavior == nil && tuned.keepAlive == nil)
        #expect(tuned.description.hasSuffix("/d?pool_size=3&keepalive=0"))
        #expect(try PostgresDatabaseURL("postgres://u@h/d?keepalive=5").clientConfiguration().options.keepAliveBehavior?.frequency == .seconds(5))
    }

    @Test(
        "a wrong URL is refused with what is wrong, never the password",
        arguments: [
            ("postgres://user:hunter2@host", "no database"),
            ("postgres://:hunter2@host/db", "no user name"),
            ("postgres://u:hunter2@host/db?sslmode=maybe", "sslmode must be one of"),
            ("postgres://u:hunter2@host/db?pool_size=1", "pool_size must be 2 to 500, not 1"),
            ("postgres://u:hunter2@host/db?write_batch=0", "write_batch must be 1 to 1000"),
            ("postgres://u:hunter2@host/db?write_concurrency=many", "write_concurrency must be 1 to 100"),
            ("postgres://u:hunter2@host/db?read_batch=1001", "read_batch must be 1 to 1000"),
            ("postgres://u:hunter2@host/db?statement_timeout=-1", "statement_timeout must be 0 to 3600, not -1"),
            ("postgres://u:hunter2@host/db?keepalive=off", "keepalive must be 0 to 3600, not off"),
            ("postgres://u:hunter2@host/db?pool_min=9", "pool_min is no longer accepted: every connection is opened on demand"),
            ("postgres://u:hunter2@host/db?read_concurrency=%0A%1B%5B31m", "read_concurrency must be 1 to 100, not \\n\\u{1B}[31m"),
            ("postgres://u:hunter2@host/db?application=x", "unknown database URL option"),
            ("mysql://u:hunter2@host/db", "not a postgres:// URL"),
            ("postgres://u:hunter2@host/db?sslmode=disable&sslmode=require", "gives option sslmode twice"),
            ("postgres://u:hunter2%zz@host/db", "password has a malformed %-escape"),
            ("postgres://u%zz:hunter2@host/db", "user name has a malformed %-escape"),
        ])
    func refusals(text: String, expected: String) throws {
        let error = #expect(throws: StorageError.self) { try PostgresDatabaseURL(text) }
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("hunter2") == false)
    }
}

@Suite("PostgreSQL passwords off the command line")
struct PostgresPasswordSourceTests {
    /// A password file with `mode` in a directory of its own; `body` gets its path.
    static func withPasswordFile(_ text: String, mode: Int = 0o600, _ body: (String) async throws -> Void) async throws {
        let directory = TestFiles.directory.appendingPathComponent("pgpass-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("pgpass").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode]))
        try await body(path)
    }

    @Test("a URL without a password takes PGPASSWORD, else the password file; a password in the URL wins; none is never shown")
    func sources() async throws {
        let fromEnvironment = try PostgresDatabaseURL("postgres://app@db.internal/ledger", environment: ["PGPASSWORD": "env-secret"])
        #expect(fromEnvironment.password == "env-secret" && !fromEnvironment.description.contains("env-secret"))
        #expect(
            try PostgresDatabaseURL("postgres://app:url-secret@db.internal/ledger", environment: ["PGPASSWORD": "env-secret"]).password
                == "url-secret")
        #expect(try PostgresDatabaseURL("postgres://app@db.internal/ledger", environment: [:]).password == nil)
        // No file where HOME says: no password, no error (as libpq).
        #expect(try PostgresDatabaseURL("postgres://app@db.internal/ledger", environment: ["HOME": "/nonexistent-home"]).password == nil)
        try await Self.withPasswordFile(
            """
            # comment:*:*:*:not-this
            other.host:5432:ledger:app:wrong-host
            db.internal:6432:ledger:app:wrong-port
            db.internal:5432:ledger:app:file-secret
            *:*:*:app:too-late

            """
        ) { path in
            let url = try PostgresDatabaseURL("postgres://app@db.internal/ledger", environment: ["PGPASSFILE": path])
            #expect(url.password == "file-secret" && !url.description.contains("file-secret"))
            // PGPASSWORD comes first, as libpq's.
            #expect(
                try PostgresDatabaseURL("postgres://app@db.internal/ledger", environment: ["PGPASSFILE": path, "PGPASSWORD": "env-secret"]).password
                    == "env-secret")
            #expect(try PostgresDatabaseURL("postgres://app@elsewhere:7000/x", environment: ["PGPASSFILE": path]).password == "too-late")
            #expect(try PostgresDatabaseURL("postgres://nobody@db.internal/ledger", environment: ["PGPASSFILE": path]).password == nil)
        }
        // ~/.pgpass when PGPASSFILE is not set.
        let home = TestFiles.directory.appendingPathComponent("home-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: home) }
        #expect(
            FileManager.default.createFile(
                atPath: home.path + "/.pgpass", contents: Data("*:*:*:*:home-secret\n".utf8), attributes: [.posixPermissions: 0o600]))
        #expect(try PostgresDatabaseURL("postgres://app@h/d", environment: ["HOME": home.path]).password == "home-secret")
        // A link to a password file is followed.
        try FileManager.default.createSymbolicLink(atPath: home.path + "/link", withDestinationPath: home.path + "/.pgpass")
        #expect(try PostgresDatabaseURL("postgres://app@h/d", environment: ["PGPASSFILE": home.path + "/link"]).password == "home-secret")
    }

    @Test("password file lines as libpq reads them: \\ escapes : and \\, a lone * matches anything, \\* is a star, the password keeps its colons")
    func fileSyntax() {
        let text = #"""
            h\:1:*:d:u:colon\:and\\backslash
            \*:*:*:u:literal-star-host
            *:5432:*:v:pass:with:colons
            short:line
            """#
        #expect(PostgresPasswordFile.password(in: text, host: "h:1", port: 5432, database: "d", username: "u") == #"colon:and\backslash"#)
        #expect(PostgresPasswordFile.password(in: text, host: "*", port: 1, database: "x", username: "u") == "literal-star-host")
        #expect(PostgresPasswordFile.password(in: text, host: "anyhost", port: 1, database: "x", username: "u") == nil)
        #expect(PostgresPasswordFile.password(in: text, host: "anyhost", port: 5432, database: "x", username: "v") == "pass:with:colons")
        #expect(PostgresPasswordFile.password(in: "h:5432:d:u:crlf\r\n", host: "h", port: 5432, database: "d", username: "u") == "crlf")
    }

    @Test("a password file group or others may read is refused, naming it and the fix, never its contents", arguments: [0o644, 0o640, 0o606])
    func looseFile(mode: Int) async throws {
        try await Self.withPasswordFile("*:*:*:*:hunter2\n", mode: mode) { path in
            let error = #expect(throws: StorageError.self) { try PostgresDatabaseURL("postgres://app@h/d", environment: ["PGPASSFILE": path]) }
            #expect(error?.message.contains(path) == true && error?.message.contains("chmod 600") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains("hunter2") == false)
        }
    }

    @Test("PostgreSQL accepts a password given only through PGPASSWORD or the password file", .needsPostgres)
    func connects() async throws {
        let base = try #require(PostgresTestDatabase.url)
        let password = try #require(base.password)
        let bare = "postgres://\(base.username)@\(base.host):\(base.port)/\(base.database)?sslmode=disable"
        let escaped = password.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ":", with: "\\:")
        try await Self.withPasswordFile("\(base.host):\(base.port):\(base.database):\(base.username):\(escaped)\n") { path in
            for environment in [["PGPASSWORD": password], ["PGPASSFILE": path]] {
                let url = try PostgresDatabaseURL(bare, environment: environment)
                #expect(url.password == password)
                #expect(!url.description.contains(password))
                let one = try await PostgresTestDatabase.withClient(url) { client in
                    var values: [Int] = []
                    for try await value in try await client.query("SELECT 1").decode(Int.self) { values.append(value) }
                    return values
                }
                #expect(one == [1])
            }
        }
        // With none anywhere, the error says where one may be given.
        let error = await #expect(throws: StorageError.self) { try await PostgresLedgerStore.open(try PostgresDatabaseURL(bare, environment: [:])) }
        #expect(
            error?.message.contains("the server asks for a password and none was given: put it in the URL, in PGPASSWORD, or in the password file")
                == true, "\(error?.message ?? "")")
    }

    @Test(
        "a database that cannot be reached is said in words (refused: is PostgreSQL running there?), never postgres-nio's own types, and never with the password"
    )
    func unreachable() async throws {
        // A port nothing listens on: bound, then closed.
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(socket, raw, length) == 0 && getsockname(socket, raw, &length) == 0
            }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        close(socket)
        let url = try PostgresDatabaseURL("postgres://app:s3cret@127.0.0.1:\(port)/ledger?sslmode=disable&connect_timeout=2")
        let error = await #expect(throws: StorageError.self) { _ = try await PostgresLedgerStore.open(url) }
        #expect(
            error?.message.contains("cannot connect: connection refused (is PostgreSQL running there, on that port?)") == true,
            "\(error?.message ?? "")")
        #expect(error.map { !$0.message.contains("SingleConnectionFailure") && !$0.message.contains("s3cret") } == true, "\(error?.message ?? "")")
    }
}
