package import AppStoreModels
package import AppStoreSigning
package import AppStoreSimulator
import Foundation
package import StorekeeperCore

/// A lifecycle engine on the sample catalog and a verifier that trusts its authority (``TestAppStore``): every
/// notification the engine records is verified, with its nested data, before a test looks at it. Plays the
/// simulator's shipped scenarios and links customers to a ledger as their apps would.
package struct SimulatorFixture {
    /// A notification as a server sees it after verification.
    package struct Seen: Sendable {
        package var type: NotificationType
        package var subtype: NotificationSubtype?
        package var status: SubscriptionStatus?
        package var transaction: TransactionInfo?
        package var renewal: RenewalInfo?
        package var payload: NotificationPayload
        /// `SUBSCRIBED/INITIAL_BUY 1`: type, subtype and status.
        package var summary: String { "\(type)\(subtype.map { "/\($0)" } ?? "")\(status.map { " \($0)" } ?? "")" }
    }

    /// A verified notification whose UUID is not the one the engine recorded.
    package struct UUIDMismatch: Error, CustomStringConvertible {
        package var recorded: String
        package var verified: String
        package var description: String { "the engine recorded \(recorded), the verified payload says \(verified)" }
    }

    /// What the sample catalog's products grant: its subscription levels, and the season pass's 89 days.
    package static let entitlements: EntitlementConfiguration = {
        var levels: [String: Int] = [:]
        for product in Catalog.sample.products where product.level != nil { levels[product.productId] = product.level }
        return EntitlementConfiguration(subscriptionLevels: levels, nonRenewingDurations: ["season.pass": 89 * 86_400])
    }()

    package var engine: LifecycleEngine
    package let verifier: SignedDataVerifier
    private var seenCount = 0

    /// A fixture at ``TestAppStore/start``; the sample catalog always makes an engine.
    package init(environment: AppStoreEnvironment = .sandbox, rate: RenewalRate = .realTime) {
        engine = try! TestAppStore.engine(environment: environment, rate: rate)
        verifier = TestAppStore.verifier(environment: environment)
    }

    /// A fixture in which each of `customers` has bought the monthly plan (one purchase notification each, in order).
    package static func monthlySubscribers(_ customers: [String]) throws -> SimulatorFixture {
        var fixture = SimulatorFixture()
        for customer in customers {
            try fixture.engine.createCustomer(id: customer)
            _ = try fixture.engine.purchase(.init(customerId: customer, productId: "pro.monthly"))
        }
        return fixture
    }

    /// The set-up many API tests start from: customer `alice` buys the monthly plan (transaction 2000000000000001).
    package static func aliceSubscribes(_ engine: inout LifecycleEngine) throws {
        try engine.createCustomer(id: "alice")
        _ = try engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
    }

    // MARK: - Acting as customers and as time

    package mutating func customer(_ id: String, storefront: String = "USA") throws {
        try engine.createCustomer(id: id, storefront: storefront)
    }

    @discardableResult
    package mutating func buy(_ customer: String, _ product: String, offer: String? = nil, quantity: Int = 1) throws -> LifecycleEngine.PurchaseResult
    {
        try engine.purchase(.init(customerId: customer, productId: product, quantity: quantity, offerId: offer))
    }

    package mutating func advance(days: Double) throws {
        try engine.advance(by: days * 86_400)
    }

    /// Plays the shipped scenario `name`.
    package mutating func play(_ name: String) async throws {
        guard let scenario = try ShippedScenarios.named(name) else { throw SimulatorError(.notFound, "no shipped scenario named \(name)") }
        let simulator = Simulator(engine: engine)
        try await ScenarioRunner(simulator: simulator).run(scenario)
        engine = await simulator.engine
    }

    // MARK: - What a server sees

    /// The notifications recorded since the last call, verified.
    package mutating func newNotifications() async throws -> [Seen] {
        let records = engine.state.notifications.dropFirst(seenCount)
        seenCount = engine.state.notifications.count
        var seen: [Seen] = []
        for record in records {
            let verified = try await verifier.verifyNotification(record.signedPayload)
            guard verified.payload.notificationUUID == record.notificationUUID else {
                throw UUIDMismatch(recorded: record.notificationUUID, verified: verified.payload.notificationUUID)
            }
            seen.append(
                Seen(
                    type: verified.payload.notificationType, subtype: verified.payload.subtype,
                    status: verified.payload.data?.status, transaction: verified.transaction?.payload,
                    renewal: verified.renewalInfo?.payload, payload: verified.payload
                ))
        }
        return seen
    }

    /// Type/subtype/status of the new notifications, e.g. `["SUBSCRIBED/INITIAL_BUY 1"]`.
    package mutating func newSummaries() async throws -> [String] {
        try await newNotifications().map(\.summary)
    }

    /// Every notification so far, verified.
    package func verifiedNotifications() async throws -> [VerifiedNotification] {
        var result: [VerifiedNotification] = []
        for record in engine.state.notifications {
            result.append(try await verifier.verifyNotification(record.signedPayload))
        }
        return result
    }

    /// What each customer's app would have submitted: their transactions, linked to them.
    package func linkCustomers(in ledger: inout Ledger) throws {
        for record in engine.state.transactions.values {
            try ledger.link(record.info, to: record.customerId)
        }
    }

    // MARK: - What apps submit

    /// What every customer's app submits (StoreKit 2 hands the app its signed transactions), signed once, verified.
    package func appSubmissions() async throws -> [(VerifiedSignedData<TransactionInfo>, String)] {
        var submissions: [(VerifiedSignedData<TransactionInfo>, String)] = []
        for record in engine.state.transactions.values.sorted(by: { $0.info.transactionId < $1.info.transactionId }) {
            let signed = try engine.signTransaction(record.info.transactionId)
            submissions.append((try await verifier.verifyTransaction(signed), record.customerId))
        }
        return submissions
    }

    /// Submits ``appSubmissions()`` to `store`.
    package func submitAll(to store: any LedgerStore) async throws {
        for (transaction, customer) in try await appSubmissions() {
            _ = try await store.submit(transaction, customerId: customer)
        }
    }
}
