import AppStoreSigning
import Foundation
import GRDB
import StorekeeperCore

/// The `jws_headers` table: every distinct JWS protected header the ledger holds, stored once and referred to by its
/// row ID from the ``StoredJWS`` columns of notifications, transactions and subscriptions (a few rows in all: one per
/// signing certificate chain). Rows are never changed or deleted, so what a committed snapshot says of one holds
/// forever and is remembered here; what a write transaction learns is remembered only once it has committed (a rolled
/// back insert's ID may be given to another header later).
final class HeaderReferences: Sendable {
    typealias Memo = JWSHeaderCache.Memo
    private let cache = JWSHeaderCache()

    /// The stored columns of one JWS: the ``StoredJWS`` parts, or the text as it came when it would not be reproduced
    /// from parts, or all `NULL` for no JWS.
    struct Columns {
        var header: Int64?
        var payload: Data?
        var signature: Data?
        var raw: String?

        static let none = Columns()

        /// The values in column order: header, payload, signature, raw.
        var arguments: StatementArguments { [header, payload, signature, raw] }
    }

    /// The reference of `text`, inserted when new.
    func reference(_ text: String, _ db: Database, _ memo: Memo) throws -> Int64 {
        if let id = cache.id(of: text, memo) { return id }
        let id: Int64
        if let existing = try Int64.fetchOne(db.cachedStatement(sql: "SELECT id FROM jws_headers WHERE header = ?"), arguments: [text]) {
            id = existing
        } else {
            try db.cachedStatement(sql: "INSERT INTO jws_headers (header) VALUES (?)").execute(arguments: [text])
            id = db.lastInsertedRowID
        }
        cache.learned(id: id, text: text, memo)
        return id
    }

    /// The header of `id`; in a write transaction (`memo` given) remembered only after commit, in a read transaction
    /// at once (it reads committed data).
    func text(_ id: Int64, _ db: Database, _ memo: Memo?) throws -> String? {
        if let text = cache.text(of: id, memo) { return text }
        guard let text = try String.fetchOne(db.cachedStatement(sql: "SELECT header FROM jws_headers WHERE id = ?"), arguments: [id]) else {
            return nil
        }
        cache.learned(id: id, text: text, memo)
        return text
    }

    /// Remembers what a committed write learned.
    func commit(_ memo: Memo) {
        cache.commit(memo)
    }

    /// `jws` in its stored columns (the text itself when it does not split into parts that give it back exactly).
    func store(_ jws: String?, _ db: Database, _ memo: Memo) throws -> Columns {
        guard let jws else { return .none }
        guard let stored = try StoredJWS(splitting: jws, reference: { try reference($0, db, memo) }) else {
            return Columns(raw: jws)
        }
        return Columns(header: stored.header, payload: Data(stored.payload), signature: Data(stored.signature))
    }

    /// The JWS stored in a row's columns named `prefix_header`, `prefix_payload`, `prefix_signature`, `prefix_raw`;
    /// `nil` when they are all `NULL` (nothing stored, or pruned).
    func jws(_ row: Row, _ prefix: String, _ db: Database, _ memo: Memo?) throws -> String? {
        if let raw = row["\(prefix)_raw"] as String? { return raw }
        guard let stored = storedJWS(row, prefix) else { return nil }
        var failure: (any Error)? = nil
        let text = stored.jws { id in
            do { return try self.text(id, db, memo) } catch {
                failure = error
                return nil
            }
        }
        if let failure { throw failure }
        guard let text else { throw StorageError("a stored JWS refers to a header the ledger does not hold (\(prefix) of a row)") }
        return text
    }

    /// The payload bytes as signed (for decoding), from the same columns as ``jws(_:_:_:_:)``; `nil` when none. A
    /// payload without nested headers (a transaction's, a renewal info's) is the stored bytes as they are.
    func payload(_ row: Row, _ prefix: String, _ db: Database, _ memo: Memo?) throws -> Data? {
        if let raw = row["\(prefix)_raw"] as String? { return try JWSHeaderCache.payload(ofRaw: raw) }
        guard let stored = row["\(prefix)_payload"] as Data? else { return nil }
        guard StoredJWS.refersToHeaders(stored) else { return stored }
        guard let parts = storedJWS(row, prefix) else { return nil }
        var failure: (any Error)? = nil
        let payload = parts.originalPayload { id in
            do { return try self.text(id, db, memo) } catch {
                failure = error
                return nil
            }
        }
        if let failure { throw failure }
        guard let payload else { throw StorageError("a stored JWS refers to a header the ledger does not hold (\(prefix) of a row)") }
        return Data(payload)
    }

    private func storedJWS(_ row: Row, _ prefix: String) -> StoredJWS? {
        guard let header = row["\(prefix)_header"] as Int64?, let payload = row["\(prefix)_payload"] as Data?,
            let signature = row["\(prefix)_signature"] as Data?
        else { return nil }
        return StoredJWS(header: header, payload: Array(payload), signature: Array(signature))
    }
}
