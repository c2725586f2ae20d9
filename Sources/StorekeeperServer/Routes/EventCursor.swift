import AppStoreSigning
import Crypto
import StorekeeperCore
import Synchronization
import _CryptoExtras

/// The polling cursors' cipher: a cursor is `c2.` and 22 characters of base64url, one AES block holding a position in
/// the outbox and eight zero bytes, under a 256-bit key the ledger makes for itself at first use (`LedgerStore.ledgerSecret(_:orNew:)`:
/// every instance of the ledger, and a copy of it, has the same). The outbox's positions are shared by every app, so an
/// app key reading its own app's events would otherwise see from its cursors how many events the others have; and a
/// cursor it made up would probe them. Encrypted, a cursor says nothing, and one the server did not give is refused
/// (its eight zero bytes come out wrong, but for one in 2^64). A position always makes the same cursor, so an empty
/// page returns the `after` it was given.
package struct EventCursor: Sendable {
    /// The secret's name in the ledger.
    package static let secretName = "events.cursor"
    static let prefix = "c2."

    let key: SymmetricKey

    package init(secret: [UInt8]) {
        key = SymmetricKey(data: secret)
    }

    package func cursor(_ position: Int64) -> String {
        var block = [UInt8](repeating: 0, count: 16)
        for index in 0..<8 { block[index] = UInt8(truncatingIfNeeded: UInt64(bitPattern: position) >> (56 - 8 * index)) }
        // A 256-bit key and a 16-byte block: AES cannot refuse either.
        try! AES.permute(&block, key: key)
        return Self.prefix + Base64URL.encode(block)
    }

    /// The position a cursor holds; `nil` for anything the server did not give.
    package func position(of cursor: String) -> Int64? {
        guard cursor.hasPrefix(Self.prefix), cursor.utf8.count == Self.prefix.utf8.count + 22,
            var block = try? Base64URL.decode(cursor.utf8.dropFirst(Self.prefix.utf8.count)), block.count == 16,
            (try? AES.inversePermute(&block, key: key)) != nil, block[8...].allSatisfy({ $0 == 0 })
        else { return nil }
        let position = block[..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard position <= UInt64(Int64.max) else { return nil }
        // Only the spelling the server writes (the decoder is strict already; this keeps the rule here too).
        return self.cursor(Int64(position)) == cursor ? Int64(position) : nil
    }

    /// The ledger's cursor key, made at the first request that needs it and then kept.
    final class Keeper: Sendable {
        private let cached = Mutex<EventCursor?>(nil)
        let store: any LedgerStore

        init(store: any LedgerStore) { self.store = store }

        func cipher() async throws(StorageError) -> EventCursor {
            if let cipher = cached.withLock({ $0 }) { return cipher }
            let secret = try await store.ledgerSecret(
                EventCursor.secretName, orNew: Array(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }))
            guard secret.count == 32 else {
                throw StorageError("the ledger's key for polling cursors (ledger_secrets '\(EventCursor.secretName)') is not 32 bytes")
            }
            let cipher = EventCursor(secret: secret)
            cached.withLock { $0 = cipher }
            return cipher
        }
    }
}
