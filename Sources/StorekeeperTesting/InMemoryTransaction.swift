import AppStoreModels
package import StorekeeperCore
package import Synchronization

/// A ledger held in memory, through the row operations a backend implements.
package final class InMemoryTransaction: LedgerWriteTransaction, Sendable {
    package let ledger = Mutex(Ledger())
    /// The outbox: events appended, and each customer's recorded state.
    package let events = Mutex<[EventDraft]>([])
    package let states = Mutex<[CustomerKey: CustomerStateRecord]>([:])
    package let outbox = OutboxSettings()

    package init() {}

    package func notificationExists(_ uuid: String) throws -> Bool { ledger.withLock { $0.notifications[uuid] != nil } }

    package func loadFamily(_ key: LedgerKey, into target: inout Ledger) throws {
        let held = ledger.withLock { $0 }
        for (id, transaction) in held.transactions where transaction.info.originalTransactionId == key.id && id.environment == key.environment {
            target.transactions[id] = transaction
        }
        target.explicitLinks[key] = held.explicitLinks[key]
        target.subscriptions[key] = held.subscriptions[key]
    }

    package func tokenOwners(of tokens: Set<AppAccountTokenKey>) throws -> [AppAccountTokenKey: String] {
        ledger.withLock { held in held.tokenOwners.filter { tokens.contains($0.key) } }
    }

    /// Nothing is erased in memory.
    package func erasedTokens(among tokens: Set<AppAccountTokenKey>) throws -> Set<AppAccountTokenKey> { [] }

    package func write(_ changes: LedgerChanges) throws {
        ledger.withLock { held in
            for transaction in changes.transactions {
                held.transactions[LedgerKey(transaction.info.environment!, transaction.info.transactionId)] = transaction
            }
            for subscription in changes.subscriptions { held.subscriptions[subscription.key] = subscription }
            held.explicitLinks.merge(changes.links) { $1 }
            held.tokenOwners.merge(changes.tokenOwners) { $1 }
            for notification in changes.notifications { held.notifications[notification.notificationUUID] = notification }
        }
    }

    package func setRecoveryWatermark(_ watermark: RecoveryWatermark) throws {}

    package func readCustomers(_ reads: OutboxReads) throws -> OutboxReadResults {
        let keys = reads.customers
        var results = OutboxReadResults()
        results.configuration = outbox.entitlements
        results.now = outbox.now
        let held = ledger.withLock { $0 }
        let stored = states.withLock { $0 }
        let drafts = events.withLock { $0 }
        for key in keys {
            results.ledgers[key] = held
            results.stored[key] = stored[key]
            if let record = stored[key], let last = drafts.last(where: { $0.customer == key && $0.sequence == record.sequence }) {
                results.lastEventStates[key] = last.state
            }
        }
        return results
    }

    package func appendEvents(_ append: OutboxAppend) throws {
        events.withLock { $0 += append.drafts }
        states.withLock { states in for record in append.records { states[record.customer] = record } }
    }
}
