import AppStoreModels
package import StorekeeperCore
package import Synchronization

/// A ledger held in memory, through the row operations a backend implements.
package final class InMemoryTransaction: LedgerWriteTransaction, Sendable {
    package let ledger = Mutex(Ledger())

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
}
