import AppStoreModels
import AppStoreSigning
import Foundation
import PostgresNIO
import StorekeeperCore

/// The PostgreSQL side of one ``LedgerUnitOfWork``: its row operations inside one transaction (`READ COMMITTED`),
/// with several Storekeeper instances writing the same database at once.
///
/// **Why locks, and which.** A unit of work reads a family (one original transaction ID's rows), decides in Swift
/// (newest `signedDate` wins, ownership rules) and writes back. Under `READ COMMITTED` two instances writing one
/// family at once would both read the old rows and the second commit would overwrite the first's newer data (a lost
/// update). So each family is locked before it is read, with a transaction-level advisory lock on a hash of its key
/// (`pg_advisory_xact_lock`): it needs no row to exist yet (a family's first notification has none to
/// `SELECT … FOR UPDATE`), serializes only the writers of that family, and is released by the commit or rollback
/// whatever happens to the process. Token owners are locked the same way before they are read, so that two
/// customers' submissions cannot both take one token. `SERIALIZABLE` would be correct too, but would abort writers of
/// unrelated families whose predicate locks happen to overlap, and turn every conflict into a retry; conditional
/// upserts alone cannot express "apply the rules to what is there". Locks are taken in ascending key order within a
/// step, and a batch of notifications (live ones arriving together, or a page of recovered ones) takes all its
/// families' locks in its first step, so two writers over the same families queue; a unit of work whose second step
/// locks more tokens may still deadlock with another, in which case PostgreSQL aborts one transaction and the store
/// runs it again (as for any serialization or deadlock failure, see ``PostgresLedgerStore``).
///
/// **A notification is applied once** because the database says so: the unit of work's first read claims its UUID
/// with `INSERT … ON CONFLICT DO NOTHING`, after taking its families' locks; a second instance claiming it waits for
/// the first's locks, then finds the row and answers "duplicate".
///
/// **Few statements.** Each statement costs a round trip and, unless prepared, the server's parse and plan: most of
/// what a write costs. So a step's reads are two prepared statements (the locks and the claim in one,
/// ``LockAndClaimStatement``; every row of its families and tokens in another, ``PostgresLedgerStore/FamilyRowsStatement``:
/// under `READ COMMITTED` each statement reads what was committed when it began, so the rows must be read by a
/// statement that begins after the locks are held), and the writes are not sent when made: they wait in ``pending``
/// and go as one prepared statement (``WriteStatement``, with the `pg_notify`) before the next read or the commit. A
/// notification that changes one purchase is then `BEGIN`, three statements and `COMMIT`, and so is a batch of them
/// (``LedgerUnitOfWork/applyingTogether(_:)``, claimed by ``LockAndClaimAllStatement``).
struct PostgresWriteTransaction: AsyncLedgerWriteTransaction {
    let store: PostgresLedgerStore
    let connection: PostgresConnection
    let memo: PostgresHeaders.Memo
    let pending = PendingWrites()

    var outboxEnabled: Bool { store.outbox.isEnabled }

    /// The advisory lock key of a subscription family (hashed by `hashtextextended` in ``LockStatement``).
    static func lockKey(family: LedgerKey) -> String {
        "family \(family.environment.rawValue) \(family.id)"
    }

    func read(_ reads: LedgerReads) async throws -> LedgerReadResults {
        try await flush()
        var results = LedgerReadResults()
        let keys =
            reads.families.map(Self.lockKey(family:))
            + reads.tokens.sorted().map { "token \($0.bundleId) \($0.environment.rawValue) \($0.token)" }
        var binds = PostgresBindings(capacity: 3)
        binds.append(keys)
        switch reads.claimNotifications.count {
        case 0:
            if !keys.isEmpty { for try await _ in try await connection.run(LockStatement.self, binds) {} }
        case 1:
            // Scalar binds: one generic plan (see ``PostgresLedgerStore/oneFamilySQL``).
            binds.append(reads.claimNotifications[0])
            binds.append(Date().epochMilliseconds)
            var claimed = false
            for try await _ in try await connection.run(LockAndClaimStatement.self, binds) { claimed = true }
            guard claimed else {
                results.existingNotifications = [reads.claimNotifications[0]]
                return results
            }
        default:
            binds.append(reads.claimNotifications)
            binds.append(Date().epochMilliseconds)
            var claimed = Set<String>()
            for try await row in try await connection.run(LockAndClaimAllStatement.self, binds) { claimed.insert(try row.decode(String.self)) }
            results.existingNotifications = Set(reads.claimNotifications).subtracting(claimed)
            guard !claimed.isEmpty else { return results }
        }
        guard !reads.families.isEmpty || !reads.tokens.isEmpty else { return results }
        try await store.loadFamilies(connection, memo, reads.families, tokens: reads.tokens, into: &results.ledger)
        results.tokenOwners = results.ledger.tokenOwners
        results.ledger.tokenOwners = [:]
        let unowned = reads.tokens.subtracting(results.tokenOwners.keys)
        if reads.erasedTokens, !unowned.isEmpty {
            // An erasure deletes a token's owner and retires it in one transaction: a token read without an owner was
            // erased, if at all, before this statement began.
            for key in unowned {
                for try await _ in try await connection.run(
                    """
                    SELECT 1 FROM erased_tokens
                    WHERE bundle_id = \(key.bundleId) AND environment = \(key.environment.rawValue) AND token = \(key.token.description)
                    """)
                {
                    results.erasedTokens.insert(key)
                }
            }
        }
        return results
    }

    func write(_ changes: LedgerChanges) async throws {
        let faults = changes.notifications.isEmpty ? nil : store.unsafeFaultInjection
        try faults?("after-apply")
        // One point per notification too, so that a test can make the database refuse one of a batch.
        for record in changes.notifications { try faults?("notification \(record.notificationUUID)") }
        try await store.save(connection, memo, changes, into: pending)
        try faults?("before-commit")
    }

    func setRecoveryWatermark(_ watermark: RecoveryWatermark) async throws {
        let app = watermark.app
        pending.watermarks["\(app.bundleId) \(app.environment.rawValue)"] = (app.bundleId, app.environment.rawValue, watermark.date.epochMilliseconds)
        try store.unsafeFaultInjection?("after-watermark")
    }

    /// Sends the pending writes and `announcement` (to the other instances), as one statement.
    func flush(announcing announcement: String? = nil) async throws {
        guard let binds = try pending.take(announcing: announcement) else { return }
        for try await _ in try await connection.run(WriteStatement.self, binds) {}
    }
}

/// Writes not sent yet, by table and key (a later write of a key replaces an earlier one, as it would have in
/// order), sent as one ``WriteStatement``.
final class PendingWrites {
    struct TransactionRow {
        var environment, id, original, productId: String
        var token: String?
        var signedDate: Int64
        var source: String
        var purchaseDate: Int64
        var type, bundleId: String
        var quantity: Int32
        var revoked: Bool
        var jws: PostgresHeaders.Columns
    }
    struct SubscriptionRow {
        var environment, original, bundleId: String
        var status: Int32?
        var statusSignedDate: Int64?
        var statusNotificationUUID: String?
        var renewalSignedDate: Int64?
        var renewal: PostgresHeaders.Columns
    }
    struct NotificationRow {
        var uuid, type: String
        var subtype: String?
        var signedDate: Int64?
        var environment: String?
        var outcome: String
        var receivedAt: Int64
        var jws: PostgresHeaders.Columns
    }

    var transactions: [String: TransactionRow] = [:]
    var subscriptions: [String: SubscriptionRow] = [:]
    var links: [String: (environment: String, original: String, customer: String)] = [:]
    var tokenOwners: [String: (bundleId: String, environment: String, token: String, customer: String)] = [:]
    var notifications: [String: NotificationRow] = [:]
    var watermarks: [String: (bundleId: String, environment: String, watermark: Int64)] = [:]

    var isEmpty: Bool {
        transactions.isEmpty && subscriptions.isEmpty && links.isEmpty && tokenOwners.isEmpty && notifications.isEmpty && watermarks.isEmpty
    }

    /// The binds of ``WriteStatement`` for every pending write and `announcement` (to the other instances), or `nil`
    /// when there is nothing to send; empties the lists.
    func take(announcing announcement: String? = nil) throws -> PostgresBindings? {
        guard !isEmpty || announcement != nil else { return nil }
        var binds = PostgresBindings(capacity: 50)
        let t = transactions.sorted { $0.key < $1.key }.map(\.value)
        try binds.appendColumn(t) { $0.environment }
        try binds.appendColumn(t) { $0.id }
        try binds.appendColumn(t) { $0.original }
        try binds.appendColumn(t) { $0.productId }
        try binds.appendColumn(t) { $0.token }
        try binds.appendColumn(t) { $0.signedDate }
        try binds.appendColumn(t) { $0.source }
        try binds.appendColumn(t) { $0.purchaseDate }
        try binds.appendColumn(t) { $0.type }
        try binds.appendColumn(t) { $0.bundleId }
        try binds.appendColumn(t) { $0.quantity }
        try binds.appendColumn(t) { $0.revoked }
        try Self.appendJWS(t.map(\.jws), to: &binds)
        let s = subscriptions.sorted { $0.key < $1.key }.map(\.value)
        try binds.appendColumn(s) { $0.environment }
        try binds.appendColumn(s) { $0.original }
        try binds.appendColumn(s) { $0.bundleId }
        try binds.appendColumn(s) { $0.status }
        try binds.appendColumn(s) { $0.statusSignedDate }
        try binds.appendColumn(s) { $0.statusNotificationUUID }
        try binds.appendColumn(s) { $0.renewalSignedDate }
        try Self.appendJWS(s.map(\.renewal), to: &binds)
        let l = links.sorted { $0.key < $1.key }.map(\.value)
        try binds.appendColumn(l) { $0.environment }
        try binds.appendColumn(l) { $0.original }
        try binds.appendColumn(l) { $0.customer }
        let o = tokenOwners.sorted { $0.key < $1.key }.map(\.value)
        try binds.appendColumn(o) { $0.bundleId }
        try binds.appendColumn(o) { $0.environment }
        try binds.appendColumn(o) { $0.token }
        try binds.appendColumn(o) { $0.customer }
        let n = notifications.sorted { $0.key < $1.key }.map(\.value)
        try binds.appendColumn(n) { $0.uuid }
        try binds.appendColumn(n) { $0.type }
        try binds.appendColumn(n) { $0.subtype }
        try binds.appendColumn(n) { $0.signedDate }
        try binds.appendColumn(n) { $0.environment }
        try binds.appendColumn(n) { $0.outcome }
        try binds.appendColumn(n) { $0.receivedAt }
        try Self.appendJWS(n.map(\.jws), to: &binds)
        let w = watermarks.sorted { $0.key < $1.key }.map(\.value)
        try binds.appendColumn(w) { $0.bundleId }
        try binds.appendColumn(w) { $0.environment }
        try binds.appendColumn(w) { $0.watermark }
        binds.append(PostgresLedgerStore.channel)
        binds.append(announcement)
        transactions = [:]
        subscriptions = [:]
        links = [:]
        tokenOwners = [:]
        notifications = [:]
        watermarks = [:]
        return binds
    }

    private static func appendJWS(_ columns: [PostgresHeaders.Columns], to binds: inout PostgresBindings) throws {
        try binds.appendColumn(columns) { $0.header }
        try binds.appendColumn(columns) { $0.payload.map { ByteBuffer(bytes: $0) } }
        try binds.appendColumn(columns) { $0.signature.map { ByteBuffer(bytes: $0) } }
        try binds.appendColumn(columns) { $0.raw }
    }
}

extension PostgresLedgerStore {
    /// Adds to `pending` the writes of what a unit of work changed, and of the notification received (completing its
    /// claimed row). Headers not yet stored are inserted now (their IDs go in the rows).
    func save(_ connection: PostgresConnection, _ memo: PostgresHeaders.Memo, _ changes: LedgerChanges, into pending: PendingWrites) async throws {
        for grant in changes.grants { try await Self.save(grant, connection) }
        for transaction in changes.transactions {
            guard let environment = transaction.info.environment else { continue }
            let info = transaction.info
            pending.transactions["\(environment.rawValue) \(info.transactionId)"] = PendingWrites.TransactionRow(
                environment: environment.rawValue, id: info.transactionId, original: info.originalTransactionId, productId: info.productId,
                token: info.appAccountToken?.description, signedDate: transaction.signedDate.epochMilliseconds, source: transaction.source,
                purchaseDate: info.purchaseDate.epochMilliseconds, type: info.type.rawValue, bundleId: info.bundleId,
                quantity: Int32(clamping: info.quantity ?? 1), revoked: info.revocationDate != nil,
                jws: try await headers.store(transaction.jws, connection, memo)
            )
        }
        for subscription in changes.subscriptions {
            let key = subscription.key
            pending.subscriptions["\(key.environment.rawValue) \(key.id)"] = PendingWrites.SubscriptionRow(
                environment: key.environment.rawValue, original: key.id, bundleId: subscription.bundleId,
                status: subscription.status.map { Int32(clamping: $0.rawValue) }, statusSignedDate: subscription.statusSignedDate?.epochMilliseconds,
                statusNotificationUUID: subscription.statusNotificationUUID, renewalSignedDate: subscription.renewalSignedDate?.epochMilliseconds,
                renewal: try await headers.store(subscription.renewalJWS, connection, memo)
            )
        }
        for (key, customer) in changes.links {
            pending.links["\(key.environment.rawValue) \(key.id)"] = (key.environment.rawValue, key.id, customer)
        }
        for (token, customer) in changes.tokenOwners {
            pending.tokenOwners["\(token.bundleId) \(token.environment.rawValue) \(token.token)"] = (
                token.bundleId, token.environment.rawValue, token.token.description, customer
            )
        }
        for record in changes.notifications {
            pending.notifications[record.notificationUUID] = PendingWrites.NotificationRow(
                uuid: record.notificationUUID, type: record.notificationType.rawValue, subtype: record.subtype?.rawValue,
                signedDate: record.signedDate?.epochMilliseconds, environment: record.environment?.rawValue, outcome: record.outcome.rawValue,
                receivedAt: Date().epochMilliseconds, jws: try await headers.store(record.signedPayload, connection, memo)
            )
        }
    }
}
