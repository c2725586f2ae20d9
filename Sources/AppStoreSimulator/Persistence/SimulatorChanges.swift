import AppStoreModels

/// The rows a save writes: every record written since the last save, as it is now (`nil`: removed), and the
/// scalars. Changes of several actions merge into one (the later write of a record wins), so one database
/// transaction saves them all.
package struct SimulatorChanges: Sendable {
    var scalars: SimulatorState.Scalars?
    var customers: [String: Customer?] = [:]
    var transactions: [String: TransactionRecord?] = [:]
    var subscriptions: [String: SubscriptionRecord?] = [:]
    var notifications: [Int: NotificationRecord] = [:]
    var consumptionInformation: [String: JSONValue?] = [:]
    var massExtensions: [String: MassExtension?] = [:]

    /// How many records it writes (the scalars not counted).
    var recordCount: Int {
        customers.count + transactions.count + subscriptions.count + notifications.count + consumptionInformation.count
            + massExtensions.count
    }

    var isEmpty: Bool { scalars == nil && recordCount == 0 }

    /// Adds `later`'s writes over these.
    mutating func merge(_ later: SimulatorChanges) {
        if let scalars = later.scalars { self.scalars = scalars }
        customers.merge(later.customers) { _, new in new }
        transactions.merge(later.transactions) { _, new in new }
        subscriptions.merge(later.subscriptions) { _, new in new }
        notifications.merge(later.notifications) { _, new in new }
        consumptionInformation.merge(later.consumptionInformation) { _, new in new }
        massExtensions.merge(later.massExtensions) { _, new in new }
    }
}
