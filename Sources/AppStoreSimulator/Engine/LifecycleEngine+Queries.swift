package import AppStoreModels
import Foundation

extension LifecycleEngine {
    /// The customer a transaction ID, original transaction ID or app transaction ID belongs to, within one app.
    package func customerId(forAnyTransactionId id: String, bundleId: String) -> String? {
        if let record = state.transactions[id], record.info.bundleId == bundleId { return record.customerId }
        return appTransactionOwner(id, bundleId: bundleId)
    }

    /// Whether `id` is some customer's app transaction ID for `bundleId`.
    package func isAppTransactionId(_ id: String, bundleId: String) -> Bool {
        state.transactions[id] == nil && appTransactionOwner(id, bundleId: bundleId) != nil
    }

    private func appTransactionOwner(_ id: String, bundleId: String) -> String? {
        state.customers.ids(withKey: .appTransaction(id)).sorted().first { state.customers[$0]?.appTransactionIds[bundleId] == id }
    }

    /// A customer's transactions in one app.
    package func transactions(customerId: String, bundleId: String) -> [TransactionRecord] {
        state.transactions.records(of: customerId).filter { $0.info.bundleId == bundleId }
    }

    /// A customer's auto-renewable subscriptions in one app (purchased and family-shared).
    package func subscriptions(customerId: String, bundleId: String) -> [SubscriptionRecord] {
        state.subscriptions.records(of: customerId).filter { $0.bundleId == bundleId }
            .sorted { $0.originalTransactionId < $1.originalTransactionId }
    }

    /// The signed renewal info of a subscription, as of now.
    package func signedRenewalInfo(originalTransactionId: String) throws(SimulatorError) -> String {
        try sign(renewalInfo(for: try subscription(originalTransactionId)))
    }

    /// The signed transaction, as of now.
    package func signTransaction(_ id: String) throws(SimulatorError) -> String {
        try signedTransaction(id)
    }

    /// The customer's signed app transaction for an app (`Get App Transaction Info`).
    package func signedAppTransaction(customerId: String, bundleId: String) throws(SimulatorError) -> String? {
        guard let app = catalog.app(bundleId), let customer = state.customers[customerId],
            let appTransactionId = customer.appTransactionIds[bundleId]
        else { return nil }
        let first =
            state.transactions.records(of: customerId).filter { $0.info.bundleId == bundleId }
            .map(\.info.purchaseDate).min() ?? state.now
        var info = AppTransaction(bundleId: bundleId)
        info.receiptType = state.environment
        info.appAppleId = state.environment == .production ? app.appAppleId : nil
        info.applicationVersion = "1"
        info.versionExternalIdentifier = 0
        info.receiptCreationDate = state.now
        info.originalPurchaseDate = first
        info.originalApplicationVersion = "1"
        info.appTransactionId = appTransactionId
        info.originalPlatform = .iOS
        return try sign(info)
    }

    // MARK: - Server actions through the API

    /// Set App Account Token: replaces the token on the subscription (current and later renewals) or purchase.
    package mutating func setAppAccountToken(originalTransactionId: String, token: LowercaseUUID) throws(SimulatorError) {
        let record = try transactionRecord(originalTransactionId)
        guard record.info.inAppOwnershipType != .familyShared else {
            throw SimulatorError(.conflict, "family-shared transactions are not supported", apiErrorCode: 4_000_185)
        }
        guard record.info.originalTransactionId == originalTransactionId else {
            throw SimulatorError(.invalidRequest, "not an original transaction ID", apiErrorCode: 4_000_187)
        }
        if var subscription = state.subscriptions[originalTransactionId] {
            subscription.appAccountToken = token
            state.subscriptions[originalTransactionId] = subscription
            state.transactions[subscription.latestTransactionId]?.info.appAccountToken = token
        } else {
            state.transactions[originalTransactionId]?.info.appAccountToken = token
        }
    }

    /// Where notifications go; `nil` for nowhere.
    package mutating func setNotificationURL(_ url: String?) {
        state.notificationURL = url
    }

    /// The environment the simulator signs for from now on.
    package mutating func setEnvironment(_ environment: AppStoreEnvironment) {
        state.environment = environment
    }

    /// Lets the clock follow real time while served (the server's ticker advances it), or stops it.
    package mutating func setClockRunning(_ running: Bool) {
        state.clockRunning = running
    }

    /// Replaces the injected faults.
    package mutating func setFaults(_ faults: FaultConfiguration) {
        state.faults = faults
    }

    /// Finish Transaction: the server delivered the purchase.
    package mutating func finishTransaction(_ id: String) throws(SimulatorError) {
        _ = try transactionRecord(id)
        state.transactions[id]?.finished = true
    }
}
