import AppStoreModels
package import AppStoreSigning
package import StorekeeperCore
import Synchronization

/// Values collected from any thread, in the order they came.
package final class Collected<Value: Sendable>: Sendable {
    private let storage = Mutex<[Value]>([])
    package init() {}
    package func add(_ value: Value) { storage.withLock { $0.append(value) } }
    package var values: [Value] { storage.withLock { $0 } }
}

extension LedgerStore {
    /// Applies every notification at once, one task each (a store's group commit batches them): each one's outcome by
    /// `notificationUUID`, in the order they were answered.
    package func applyAllAtOnce(_ notifications: [VerifiedNotification]) async -> [(String, Result<ApplyOutcome, StorageError>)] {
        let outcomes = Collected<(String, Result<ApplyOutcome, StorageError>)>()
        await withTaskGroup(of: Void.self) { group in
            for notification in notifications {
                group.addTask {
                    do throws(StorageError) {
                        outcomes.add((notification.payload.notificationUUID, .success(try await self.apply(notification))))
                    } catch {
                        outcomes.add((notification.payload.notificationUUID, .failure(error)))
                    }
                }
            }
        }
        return outcomes.values
    }
}
