import ArgumentParser
import Foundation
import StorekeeperCore
import StorekeeperSQLite

struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the ledger into a new SQLite file, consistent as of one moment, while the server keeps running.",
        discussion: "Prints what the copy holds as JSON. The copy is a ledger like any other: serve it with --database."
    )

    @Option(help: "The server's SQLite database.") var database: String = "storekeeper.sqlite"
    @Option(help: "The new file (never overwritten).") var to: String

    func run() throws {
        do {
            // A PostgreSQL ledger is backed up with pg_dump (Operations): `backup` copies SQLite files.
            try LedgerDatabase.requireSQLitePath(database, option: "--database")
            try LedgerDatabase.requireSQLitePath(to, option: "--to")
            try JSONOutput.print(try SQLiteLedgerStore.backup(database: database, to: to))
        } catch {
            reportError("\(error)")
            throw ExitCode.failure(for: error)
        }
    }
}
