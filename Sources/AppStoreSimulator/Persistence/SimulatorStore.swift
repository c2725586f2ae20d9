import AppStoreModels
import Foundation
import GRDB

/// The simulator's database, `DIR/simulator.sqlite`: SQLite in WAL mode with `synchronous = FULL`, one row per
/// record, each as JSON (customers, transactions, subscriptions, notifications with their delivery attempts,
/// consumption information, mass extensions), and one row for the scalars (clock, counters, faults, configuration,
/// open refund requests). A save writes only the records an action changed, in one transaction, so its cost does
/// not grow with history; a commit that returned is on disk (the WAL is synced), so a crash loses nothing that was
/// acknowledged. Loading reads every row once, at start.
package final class SimulatorStore: Sendable {
    let database: DatabaseQueue
    let path: String
    /// Commits run here, off the Swift concurrency pool: they block a thread for the `fsync`.
    private let queue = DispatchQueue(label: "AppStoreSimulator.SimulatorStore")

    /// The tables of keyed records (notifications are keyed by position).
    enum Table: String, CaseIterable {
        case customers, transactions, subscriptions
        case consumptionInformation = "consumption_information"
        case massExtensions = "mass_extensions"
    }

    /// Opens (creating and migrating) the database at `path`.
    init(path: String) throws(SimulatorError) {
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        configuration.busyMode = .timeout(10)
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
            // GRDB sets `synchronous = NORMAL` when it turns WAL on, after `prepareDatabase`: set back to FULL.
            try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            try Self.migrator.migrate(database)
        } catch {
            throw SimulatorError(.storage, "cannot open the simulator database \(path): \(error)")
        }
        self.path = path
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: simulator") { db in
            try db.execute(sql: "CREATE TABLE scalars (id INTEGER PRIMARY KEY CHECK (id = 1), json BLOB NOT NULL)")
            for table in Table.allCases {
                try db.execute(sql: "CREATE TABLE \(table.rawValue) (id TEXT PRIMARY KEY NOT NULL, json BLOB NOT NULL)")
            }
            try db.execute(sql: "CREATE TABLE notifications (position INTEGER PRIMARY KEY, json BLOB NOT NULL)")
        }
        return migrator
    }

    /// The connection's `PRAGMA synchronous` (2: FULL).
    func synchronousSetting() throws -> Int {
        try database.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// Whether the database holds a simulator (its scalars row is written with the first state).
    func holdsState() throws(SimulatorError) -> Bool {
        do {
            return try database.read { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM scalars)") ?? false }
        } catch {
            throw SimulatorError(.storage, "cannot read the simulator database \(path): \(error)")
        }
    }

    // MARK: - Loading

    /// Every record, as a state (nothing marked changed).
    func load() throws(SimulatorError) -> SimulatorState {
        do {
            return try database.read { db in
                let decoder = AppStoreJSON.makeDecoder()
                guard let scalars = try Data.fetchOne(db, sql: "SELECT json FROM scalars WHERE id = 1") else {
                    throw SimulatorError(.storage, "\(path) holds no simulator; run `storekeeper simulator init`")
                }
                let loaded = try decoder.decode(SimulatorState.Scalars.self, from: scalars)
                var state = SimulatorState(environment: loaded.environment, renewalRate: loaded.renewalRate, now: loaded.now)
                state.scalars = loaded
                try Self.load(db, .customers, decoder) { (id, record: Customer) in state.customers[id] = record }
                try Self.load(db, .transactions, decoder) { (id, record: TransactionRecord) in state.transactions[id] = record }
                try Self.load(db, .subscriptions, decoder) { (id, record: SubscriptionRecord) in state.subscriptions[id] = record }
                try Self.load(db, .consumptionInformation, decoder) { (id, record: JSONValue) in state.consumptionInformation[id] = record }
                try Self.load(db, .massExtensions, decoder) { (id, record: MassExtension) in state.massExtensions[id] = record }
                let rows = try Row.fetchCursor(db, sql: "SELECT position, json FROM notifications ORDER BY position")
                while let row = try rows.next() {
                    let position: Int = row[0]
                    guard position == state.notifications.count else {
                        throw SimulatorError(.storage, "\(path): notification \(state.notifications.count) is missing")
                    }
                    state.notifications.append(try decoder.decode(NotificationRecord.self, from: row[1] as Data))
                }
                state.forgetChanges()
                return state
            }
        } catch let error as SimulatorError {
            throw error
        } catch {
            throw SimulatorError(.storage, "cannot load the simulator database \(path): \(error)")
        }
    }

    private static func load<Record: Decodable>(
        _ db: Database, _ table: Table, _ decoder: JSONDecoder, into add: (String, Record) -> Void
    ) throws {
        let rows = try Row.fetchCursor(db, sql: "SELECT id, json FROM \(table.rawValue)")
        while let row = try rows.next() {
            add(row[0], try decoder.decode(Record.self, from: row[1] as Data))
        }
    }

    // MARK: - Saving

    /// Writes `changes` in one transaction, on the store's own thread; returns once they are on disk.
    func commit(_ changes: SimulatorChanges) async throws(SimulatorError) {
        let result: Result<Void, SimulatorError> = await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: Result { () throws(SimulatorError) in try self.write(changes) })
            }
        }
        try result.get()
    }

    /// Writes `changes` in one transaction, blocking the caller until they are on disk.
    func write(_ changes: SimulatorChanges) throws(SimulatorError) {
        do {
            try database.write { db in
                let encoder = AppStoreJSON.makeEncoder()
                if let scalars = changes.scalars {
                    try db.execute(
                        sql: "INSERT INTO scalars (id, json) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET json = excluded.json",
                        arguments: [try encoder.encode(scalars)]
                    )
                }
                try Self.write(db, .customers, changes.customers, encoder)
                try Self.write(db, .transactions, changes.transactions, encoder)
                try Self.write(db, .subscriptions, changes.subscriptions, encoder)
                try Self.write(db, .consumptionInformation, changes.consumptionInformation, encoder)
                try Self.write(db, .massExtensions, changes.massExtensions, encoder)
                let upsert = try db.cachedStatement(
                    sql: "INSERT INTO notifications (position, json) VALUES (?, ?) ON CONFLICT (position) DO UPDATE SET json = excluded.json"
                )
                for (position, record) in changes.notifications {
                    try upsert.execute(arguments: [position, try encoder.encode(record)])
                }
            }
        } catch {
            throw SimulatorError(.storage, "cannot write the simulator database \(path): \(error)")
        }
    }

    private static func write<Record: Encodable>(
        _ db: Database, _ table: Table, _ records: [String: Record?], _ encoder: JSONEncoder
    ) throws {
        guard !records.isEmpty else { return }
        let upsert = try db.cachedStatement(
            sql: "INSERT INTO \(table.rawValue) (id, json) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET json = excluded.json"
        )
        let delete = try db.cachedStatement(sql: "DELETE FROM \(table.rawValue) WHERE id = ?")
        for (id, record) in records {
            if let record {
                try upsert.execute(arguments: [id, try encoder.encode(record)])
            } else {
                try delete.execute(arguments: [id])
            }
        }
    }

    /// The size of the database on disk (the main file and its WAL), in bytes.
    package var sizeOnDisk: Int64 {
        [path, path + "-wal"].reduce(0) { total, file in
            total + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.int64Value ?? 0)
        }
    }
}
