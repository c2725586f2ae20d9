import AppStoreSigning
import Crypto
import Foundation
import PostgresNIO
import StorekeeperCore
import Synchronization

/// The `jws_headers` table from PostgreSQL: every distinct JWS protected header the ledger holds, stored once
/// (found by its SHA-256) and referred to by its ID from the ``StoredJWS`` columns. Rows are never changed or
/// deleted, so what a committed row says holds forever and is remembered; what a write transaction inserts is
/// remembered only once it has committed (a rolled back ID refers to nothing).
final class PostgresHeaders: Sendable {
    private let committed = Mutex<(ids: [String: Int64], texts: [Int64: String])>(([:], [:]))

    /// What one write transaction learned, remembered for good by ``commit(_:)`` after its commit.
    final class Memo: @unchecked Sendable {
        var ids: [String: Int64] = [:]
        var texts: [Int64: String] = [:]
    }

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
            if let id = self.committed.withLock({ $0.ids[text] }) ?? memo.ids[text] { return id }
            // A distinct stand-in per header (the debug build checks the round trip of this first split too).
            unknown.append(text)
            return 10_000_000_000_000_000 + Int64(unknown.count)
        }
        guard var stored = try StoredJWS(splitting: jws, reference: known) else { return Columns(raw: jws) }
        if !unknown.isEmpty {
            for text in unknown where memo.ids[text] == nil { try await insert(text, connection, memo) }
            stored = try StoredJWS(splitting: jws, reference: { text in
                guard let id = self.committed.withLock({ $0.ids[text] }) ?? memo.ids[text] else { throw Missing() }
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
        memo.ids[text] = id
        memo.texts[id] = text
    }

    /// Remembers what a committed write learned.
    func commit(_ memo: Memo) {
        guard !memo.ids.isEmpty else { return }
        committed.withLock { cache in
            cache.ids.merge(memo.ids) { old, _ in old }
            cache.texts.merge(memo.texts) { old, _ in old }
        }
    }

    /// Makes sure the texts of these header references are known (read from committed rows).
    func load(_ ids: Set<Int64>, _ connection: PostgresConnection, _ memo: Memo?) async throws {
        let missing = committed.withLock { cache in ids.filter { cache.texts[$0] == nil && memo?.texts[$0] == nil } }
        guard !missing.isEmpty else { return }
        let list = Array(missing)
        var found: [(Int64, String)] = []
        for try await (id, text) in try await connection.run("SELECT id, header FROM jws_headers WHERE id = ANY(\(list))").decode((Int64, String).self) {
            found.append((id, text))
        }
        committed.withLock { cache in
            for (id, text) in found {
                cache.texts[id] = text
                cache.ids[text] = id
            }
        }
    }

    /// The header references a stored JWS uses (its outer header and the nested ones of its payload).
    func references(_ columns: Columns) -> Set<Int64> {
        guard columns.raw == nil, let header = columns.header, let payload = columns.payload else { return [] }
        var ids: Set<Int64> = [header]
        guard payload.contains(StoredJWS.marker) else { return ids }
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
        let stored = StoredJWS(header: header, payload: Array(payload), signature: Array(signature))
        guard let text = stored.jws(header: { self.text($0, memo) }) else {
            throw StorageError("a stored JWS refers to a header the ledger does not hold")
        }
        return text
    }

    /// The payload bytes as signed (for decoding), `nil` when none; its headers must have been loaded.
    func payload(_ columns: Columns, _ memo: Memo?) throws -> Data? {
        if let raw = columns.raw {
            let parts = raw.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 3, let payload = try? Base64URL.decode(parts[1].utf8) else { throw StorageError("a stored JWS is not a compact JWS") }
            return Data(payload)
        }
        guard let header = columns.header, let payload = columns.payload else { return nil }
        guard payload.contains(StoredJWS.marker) else { return payload }
        let stored = StoredJWS(header: header, payload: Array(payload), signature: [])
        guard let original = stored.originalPayload(header: { self.text($0, memo) }) else {
            throw StorageError("a stored JWS refers to a header the ledger does not hold")
        }
        return Data(original)
    }

    private func text(_ id: Int64, _ memo: Memo?) -> String? {
        memo?.texts[id] ?? committed.withLock { $0.texts[id] }
    }
}
