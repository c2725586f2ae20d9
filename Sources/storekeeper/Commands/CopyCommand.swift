import AppStoreModels
import ArgumentParser
import Foundation
import Logging
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite

struct CopyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copy a SQLite ledger into an empty PostgreSQL database, then check every customer reads the same from both.",
        discussion: """
            For a ledger that outgrew SQLite. Stop the server first (the copy reads the file page by page). Every \
            record is copied as it is (notifications with their raw payloads and when they were received, refused \
            requests, recovery watermarks); then each customer's ledger is read from both databases and compared. \
            Prints a JSON report; exits 1 if any customer differs. The target must be empty (a new database).
            """
    )

    @Option(help: "The SQLite ledger to copy.") var from: String
    @Option(help: "The PostgreSQL database to copy into (postgres://…; migrated first).") var to: String

    func run() async throws {
        do {
            // The options' values first, then the files they name.
            try LedgerDatabase.requireSQLitePath(from, option: "--from")
            guard PostgresDatabaseURL.isPostgres(to) else {
                // A mistyped URL is named as one, never shown (its password).
                try LedgerDatabase.refuseMistypedURL(to, option: "--to", wanting: .postgres)
                throw CLIError(code: "invalid-option", message: "--to must be a postgres:// URL (copy moves a SQLite ledger into PostgreSQL)")
            }
            let url = try LedgerDatabase.postgresURL(to, option: "--to")
            guard FileManager.default.fileExists(atPath: from) else {
                throw CLIError(code: "no-such-file", message: "no SQLite ledger at \(UntrustedText.quoted(from, limit: 256))")
            }
            var logger = Logger(label: "storekeeper")
            logger.logLevel = .warning
            // No server may write the file while it is copied.
            let lock = try LedgerDatabase.lock(from, purpose: "storekeeper copy")
            defer { lock.release() }
            let source = try SQLiteLedgerStore(path: from, creating: false)
            let target = try await PostgresLedgerStore.open(url, logger: logger)
            let bar = ProgressLine(label: "copy")
            do {
                let report = try await LedgerCopy.copy(from: source, to: target) { records in bar.show(count: records) }
                bar.finish()
                await target.close()
                // Closed before the lock is given back (the lock's descriptor on the file closes with it).
                await source.close()
                try JSONOutput.print(report)
                if !report.customersDiffering.isEmpty { throw ExitCode.failure }
            } catch {
                bar.finish()
                await target.close()
                await source.close()
                throw error
            }
        } catch let error as ExitCode {
            throw error
        } catch {
            reportError("\(error)")
            throw ExitCode.failure(for: error)
        }
    }
}
