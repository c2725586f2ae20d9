import StorekeeperCore
import PostgresNIO
@testable import StorekeeperPostgres
import Testing

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

    @Test("the pool keeps open the connections its batchers use (within pool_size) and pings idle ones every keepalive seconds, never with 0")
    func pool() throws {
        let defaults = try PostgresDatabaseURL("postgres://u@h/d").clientConfiguration().options
        #expect(defaults.maximumConnections == 20 && defaults.minimumConnections == 9) // 4 writers, 4 readers, the listener
        #expect(defaults.keepAliveBehavior?.frequency == .seconds(30))
        #expect(try PostgresDatabaseURL("postgres://u@h/d?pool_min=0").clientConfiguration().options.minimumConnections == 0)
        #expect(try PostgresDatabaseURL("postgres://u@h/d?pool_min=12&read_concurrency=20").clientConfiguration().options.minimumConnections == 12)
        #expect(try PostgresDatabaseURL("postgres://u@h/d?read_concurrency=30").clientConfiguration().options.minimumConnections == 20)
        let tuned = try PostgresDatabaseURL("postgres://u@h/d?pool_size=3&keepalive=0")
        let options = try tuned.clientConfiguration().options
        #expect(options.maximumConnections == 3 && options.minimumConnections == 3)
        #expect(options.keepAliveBehavior == nil && tuned.keepAlive == nil)
        #expect(tuned.description.hasSuffix("/d?pool_size=3&keepalive=0"))
        #expect(try PostgresDatabaseURL("postgres://u@h/d?keepalive=5").clientConfiguration().options.keepAliveBehavior?.frequency == .seconds(5))
    }

    @Test("a wrong URL is refused with what is wrong, never the password", arguments: [
        ("postgres://user:hunter2@host", "no database"),
        ("postgres://:hunter2@host/db", "no user name"),
        ("postgres://u:hunter2@host/db?sslmode=maybe", "sslmode must be one of"),
        ("postgres://u:hunter2@host/db?pool_size=1", "pool_size must be 2 to 500, not 1"),
        ("postgres://u:hunter2@host/db?write_batch=0", "write_batch must be 1 to 1000"),
        ("postgres://u:hunter2@host/db?write_concurrency=many", "write_concurrency must be 1 to 100"),
        ("postgres://u:hunter2@host/db?read_batch=1001", "read_batch must be 1 to 1000"),
        ("postgres://u:hunter2@host/db?statement_timeout=-1", "statement_timeout must be 0 to 3600, not -1"),
        ("postgres://u:hunter2@host/db?keepalive=off", "keepalive must be 0 to 3600, not off"),
        ("postgres://u:hunter2@host/db?pool_min=-2", "pool_min must be 0 to 500, not -2"),
        ("postgres://u:hunter2@host/db?read_concurrency=%0A%1B%5B31m", "read_concurrency must be 1 to 100, not \\n\\u{1B}[31m"),
        ("postgres://u:hunter2@host/db?application=x", "unknown database URL option"),
        ("mysql://u:hunter2@host/db", "not a postgres:// URL"),
    ])
    func refusals(text: String, expected: String) throws {
        let error = #expect(throws: StorageError.self) { try PostgresDatabaseURL(text) }
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("hunter2") == false)
    }
}
