import AppStoreModels
import AppStoreSigning

/// The answers to ``LedgerReads``.
package struct LedgerReadResults: Sendable {
    /// The notifications to claim that were already in the ledger (when all were, nothing else was read).
    package var existingNotifications: Set<String> = []
    /// Every transaction, link and subscription record of the families asked for.
    package var ledger = Ledger()
    /// The owners of the tokens asked for that have one.
    package var tokenOwners: [AppAccountTokenKey: String] = [:]
    /// The tokens asked for, without an owner, that a customer's erasure retired (when ``LedgerReads/erasedTokens``).
    package var erasedTokens: Set<AppAccountTokenKey> = []
    /// Whether the store's writes append events (``OutboxSettings/isEnabled``): when not, a unit of work skips the
    /// outbox's part entirely (its snapshots, who each change concerns), as a ledger without an outbox would.
    package var outboxEnabled = true

    package init() {}
}

/// One unit of work on the ledger as the steps a backend runs, the pure core deciding and the backend doing (as
/// postgres-nio's `ConnectionStateMachine` returns actions that its channel handler executes): read, then write,
/// then the result. The rules are all in the steps; a backend only answers reads and writes rows, synchronously
/// (SQLite, inside GRDB's write closure) or asynchronously (PostgreSQL), with `run(in:)`.
package indirect enum LedgerStep<Result> {
    /// Read these, then go on with what the continuation returns.
    case read(LedgerReads, (LedgerReadResults) -> LedgerStep<Result>)
    /// Write these changes (and the notification received, if any), then go on.
    case write(LedgerChanges, then: LedgerStep<Result>)
    /// Move an app's notification-recovery watermark, then go on.
    case setWatermark(RecoveryWatermark, then: LedgerStep<Result>)
    /// Read these customers' ledgers and outbox states (a backend with concurrent writers locks the states, in this
    /// order), then go on.
    case readCustomers(OutboxReads, (OutboxReadResults) -> LedgerStep<Result>)
    /// Append these events and record these states, then go on.
    case appendEvents(OutboxAppend, then: LedgerStep<Result>)
    /// Done.
    case done(Result)

    /// This unit of work followed by the one `next` makes of its result.
    package func flatMap<Next>(_ next: @escaping (Result) -> LedgerStep<Next>) -> LedgerStep<Next> {
        switch self {
        case .read(let reads, let resume): .read(reads) { resume($0).flatMap(next) }
        case .write(let changes, let rest): .write(changes, then: rest.flatMap(next))
        case .setWatermark(let watermark, let rest): .setWatermark(watermark, then: rest.flatMap(next))
        case .readCustomers(let reads, let resume): .readCustomers(reads) { resume($0).flatMap(next) }
        case .appendEvents(let append, let rest): .appendEvents(append, then: rest.flatMap(next))
        case .done(let result): next(result)
        }
    }

    /// Runs the steps in a backend's synchronous write transaction.
    package func run(in transaction: some LedgerWriteTransaction) throws -> Result {
        var step = self
        while true {
            switch step {
            case .read(let reads, let resume):
                var results = try transaction.read(reads)
                results.outboxEnabled = transaction.outboxEnabled
                step = resume(results)
            case .write(let changes, let rest):
                try transaction.write(changes)
                step = rest
            case .setWatermark(let watermark, let rest):
                try transaction.setRecoveryWatermark(watermark)
                step = rest
            case .readCustomers(let reads, let resume): step = resume(try transaction.readCustomers(reads))
            case .appendEvents(let append, let rest):
                try transaction.appendEvents(append)
                step = rest
            case .done(let result): return result
            }
        }
    }

    /// Runs the steps in a backend's asynchronous write transaction.
    package func run(in transaction: some AsyncLedgerWriteTransaction) async throws -> Result {
        var step = self
        while true {
            switch step {
            case .read(let reads, let resume):
                var results = try await transaction.read(reads)
                results.outboxEnabled = transaction.outboxEnabled
                step = resume(results)
            case .write(let changes, let rest):
                try await transaction.write(changes)
                step = rest
            case .setWatermark(let watermark, let rest):
                try await transaction.setRecoveryWatermark(watermark)
                step = rest
            case .readCustomers(let reads, let resume): step = resume(try await transaction.readCustomers(reads))
            case .appendEvents(let append, let rest):
                try await transaction.appendEvents(append)
                step = rest
            case .done(let result): return result
            }
        }
    }
}
