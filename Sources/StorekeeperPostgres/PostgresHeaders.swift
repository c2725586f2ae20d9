import AppStoreSigning
import Crypto
import Foundation
import PostgresNIO
import StorekeeperCore

/// The `jws_headers` table from PostgreSQL: every distinct JWS protected header the ledger holds, stored once
/// (found by its SHA-256) and referred to by its ID from the ``StoredJWS`` columns, remembered as SQLite's are
/// (``JWSHeaderCache``).
final class PostgresHeaders: Sendable {
    typealias Memo = JWSHeaderCache.Memo
    private let cache = JWSHeaderCache()

    /// The stored columns of one JWS (all `nil` for no JWS).
    struct Columns {
        var header: Int64?
        var payload: Data?
        var signature: Data?
        var raw: String?
    }

    private struct Missing: Error {}

    /// `jws` in its stored columns: split against the headers known, inserting the unknown ones first.
    func store(_ jws: String?, _ connection: PostgresConnection, _ memo: Memo) async throws -> Columns {
        guard let jws else { return Columns() }
        var unknown: [String] = []
        let known: (String) throws -> Int64 = { text in
            if let id = self.cache.id(of: text, memo) { return id }
            // A distinct stand-in per header (the debug build checks the round trip of this first split too).
            unknown.append(text)
            return 10_000_000_000_000_000 + Int64(unknown.count)
        }
        guard var stored = try StoredJWS(splitting: jws, reference: known) else { return Columns(raw: jws) }
        if !unknown.isEmpty {
            for text in unknown where cache.id(of: text, memo) == nil { try await insert(text, connection, memo) }
            stored = try StoredJWS(
                splitting: jws,
                reference: { text in
                    guard let id = self.cache.id(of: text, memo) else { throw Missing() }
                    return id
                })!
        }
        return Columns(header: stored.header, payload: Data(stored.payload), signature: Data(stored.signature))
    }

    private func insert(_ text: String, _ connection: PostgresConnection, _ memo: Memo) async throws {
        let hash = Data(SHA256.hash(data: Data(text.utf8)))
        var id: Int64? = nil
        // Another instance inserting the same header makes this wait for its commit, then do nothing.
        for try await inserted in try await connection.run(
            "INSERT INTO jws_headers (sha256, header) VALUES (\(hash), \(text)) ON CONFLICT (sha256) DO NOTHING RETURNING id"
        ).decode(Int64.self) { id = inserted }
        if id == nil {
            for try await existing in try await connection.run("SELECT id FROM jws_headers WHERE sha256 = \(hash)").decode(Int64.self) {
                id = existing
            }
        }
        guard let id else { throw StorageError("a JWS header could not be stored") }
        cache.learned(id: id, text: text, memo)
    }

    /// Remembers what a committed write learned.
    func commit(_ memo: Memo) {
        cache.commit(memo)
    }

    /// Makes sure the texts of these header references are known (read from committed rows).
    func load(_ ids: Set<Int64>, _ connection: PostgresConnection, _ memo: Memo?) async throws {
        let missing = ids.filter { cache.text(of: $0, memo) == nil }
        guard !missing.isEmpty else { return }
        let list = Array(missing)
        var found: [(Int64, String)] = []
        for try await (id, text) in try await connection.run("SELECT id, header FROM jws_headers WHERE id = ANY(\(list))").decode(
            (Int64, String).self)
        {
            found.append((id, text))
        }
        // Read from committed rows: remembered for good.
        for (id, text) in found { cache.learned(id: id, text: text, nil) }
    }

    /// The header references a stored JWS uses (its outer header and the nested ones of its payload).
    func references(_ columns: Columns) -> Set<Int64> {
        guard columns.raw == nil, let header = columns.header, let payload = columns.payload else { return [] }
        var ids: Set<Int64> = [header]
        guard StoredJWS.refersToHeaders(payload) else { return ids }
        _ = StoredJWS(header: header, payload: Array(payload), signature: []).originalPayload { id in
            ids.insert(id)
            return ""
        }
        return ids
    }

    /// The JWS stored in `columns`, `nil` when none (pruned); its headers must have been ``load(_:_:_:)``ed.
    func jws(_ columns: Columns, _ memo: Memo?) throws -> String? {
        if let raw = columns.raw { return raw }
        guard let header = columns.header, let payload = columns.payload, let signature = columns.signature else { return nil }
        guard let text = cache.jws(StoredJWS(header: header, payload: Array(payload), signature: Array(signature)), memo) else {
            throw JWSHeaderCache.unknownHeader("a PostgreSQL row")
        }
        return text
    }

    /// The payload bytes as signed (for decoding), `nil` when none; its headers must have been loaded.
    func payload(_ columns: Columns, _ memo: Memo?) throws -> Data? {
        if let raw = columns.raw { return try JWSHeaderCache.payload(ofRaw: raw) }
        guard let header = columns.header, let payload = columns.payload else { return nil }
        guard StoredJWS.refersToHeaders(payload) else { return payload }
        guard let original = cache.payload(StoredJWS(header: header, payload: Array(payload), signature: []), memo) else {
            throw JWSHeaderCache.unknownHeader("a PostgreSQL row")
        }
        return Data(original)
    }
}
