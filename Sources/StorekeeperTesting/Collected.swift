import Synchronization

/// Values collected from any thread, in the order they came.
package final class Collected<Value: Sendable>: Sendable {
    private let storage = Mutex<[Value]>([])
    package init() {}
    package func add(_ value: Value) { storage.withLock { $0.append(value) } }
    package var values: [Value] { storage.withLock { $0 } }
}
