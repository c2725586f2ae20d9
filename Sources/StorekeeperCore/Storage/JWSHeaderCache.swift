import AppStoreSigning
package import Foundation
import Synchronization

/// The JWS protected headers a ledger's `jws_headers` table holds, as a backend remembers them (SQLite's
/// `HeaderReferences`, PostgreSQL's `PostgresHeaders`): rows are never changed or deleted, so what a committed row
/// says holds forever and is remembered for good; what a write transaction learns goes into its ``Memo`` and is
/// remembered only once it has committed (a rolled back row's ID refers to nothing).
package final class JWSHeaderCache: Sendable {
    /// A header's text as a dictionary key that hashes its length, start and end only (a header is kilobytes of
    /// base64, and hashing all of it on every write cost more than the rest of the look-up); equality compares it
    /// whole, so two headers are never confused.
    package struct HeaderText: Hashable {
        package let text: String

        package init(_ text: String) { self.text = text }

        package func hash(into hasher: inout Hasher) {
            let bytes = text.utf8
            hasher.combine(bytes.count)
            for byte in bytes.prefix(256) { hasher.combine(byte) }
            for byte in bytes.suffix(32) { hasher.combine(byte) }
        }
    }

    /// What one write transaction learned, remembered for good by ``commit(_:)`` after its commit. Used by one
    /// transaction at a time.
    package final class Memo: @unchecked Sendable {
        var ids: [HeaderText: Int64] = [:]
        var texts: [Int64: String] = [:]

        package init() {}
    }

    private let committed = Mutex<(ids: [HeaderText: Int64], texts: [Int64: String])>(([:], [:]))

    package init() {}

    /// The reference of `text`, if known (committed, or learned by this transaction).
    package func id(of text: String, _ memo: Memo) -> Int64? {
        let key = HeaderText(text)
        return committed.withLock { $0.ids[key] } ?? memo.ids[key]
    }

    /// The text of reference `id`, if known.
    package func text(of id: Int64, _ memo: Memo?) -> String? {
        memo?.texts[id] ?? committed.withLock { $0.texts[id] }
    }

    /// Remembers a header: in `memo` when a write transaction learned it, for good when read from committed rows
    /// (`memo` nil).
    package func learned(id: Int64, text: String, _ memo: Memo?) {
        if let memo {
            memo.ids[HeaderText(text)] = id
            memo.texts[id] = text
        } else {
            committed.withLock {
                $0.ids[HeaderText(text)] = id
                $0.texts[id] = text
            }
        }
    }

    /// Remembers what a committed write learned.
    package func commit(_ memo: Memo) {
        guard !memo.ids.isEmpty else { return }
        committed.withLock { cache in
            cache.ids.merge(memo.ids) { old, _ in old }
            cache.texts.merge(memo.texts) { old, _ in old }
        }
    }

    /// The JWS of stored parts whose headers are known; `nil` when one is not.
    package func jws(_ stored: StoredJWS, _ memo: Memo?) -> String? {
        stored.jws { text(of: $0, memo) }
    }

    /// The payload bytes as signed of stored parts whose headers are known; `nil` when one is not. A payload
    /// without nested headers (a transaction's, a renewal info's) is the stored bytes as they are.
    package func payload(_ stored: StoredJWS, _ memo: Memo?) -> [UInt8]? {
        stored.originalPayload { text(of: $0, memo) }
    }

    /// The payload of a JWS kept as text (one that would not be reproduced from parts).
    package static func payload(ofRaw raw: String) throws(StorageError) -> Data {
        let parts = raw.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = try? Base64URL.decode(parts[1].utf8) else { throw StorageError("a stored JWS is not a compact JWS") }
        return Data(payload)
    }

    /// The error for a stored JWS whose header reference the ledger does not hold.
    package static func unknownHeader(_ place: String) -> StorageError {
        StorageError("a stored JWS refers to a header the ledger does not hold (\(place))")
    }
}
