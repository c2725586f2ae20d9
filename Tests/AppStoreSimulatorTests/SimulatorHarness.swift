import AppStoreModels
import AppStoreSigning
@testable import AppStoreSimulator
import Foundation
import Testing

/// A lifecycle engine on the sample catalog, and a verifier that trusts its CA: every notification the engine
/// records is verified (with its nested data) before a test looks at it.
struct SimulatorHarness {
    static let start = Date(timeIntervalSince1970: 1_780_000_000)  // 2026-05-28
    static let bundleID = "com.example.storekeeper"
    static let authority: TestCertificateAuthority = {
        var options = TestCertificateAuthority.Options()
        options.names = .storekeeper("Storekeeper Simulator Test")
        options.validity = Date(timeIntervalSince1970: 1_577_836_800)...Date(timeIntervalSince1970: 2_208_988_800)
        return try! TestCertificateAuthority.generate(options: options)
    }()
    static let signer = try! authority.makeSigner()

    /// A notification as a server would see it after verification.
    struct Seen {
        var type: NotificationType
        var subtype: NotificationSubtype?
        var status: SubscriptionStatus?
        var transaction: TransactionInfo?
        var renewal: RenewalInfo?
        var payload: NotificationPayload
        var summary: String { "\(type)\(subtype.map { "/\($0)" } ?? "")\(status.map { " \($0)" } ?? "")" }
    }

    var engine: LifecycleEngine
    let verifier: SignedDataVerifier
    private var seenCount = 0

    init(environment: AppStoreEnvironment = .sandbox, rate: RenewalRate = .realTime) {
        engine = try! LifecycleEngine(
            catalog: .sample, state: SimulatorState(environment: environment, renewalRate: rate, now: Self.start),
            signer: Self.signer
        )
        verifier = SignedDataVerifier(configuration: try! .init(
            bundleID: Self.bundleID, appAppleID: 6_450_000_001, environment: environment,
            trustedRoots: [Self.authority.rootCertificate]
        ))
    }

    /// The notifications recorded since the last call, verified.
    mutating func newNotifications(sourceLocation: SourceLocation = #_sourceLocation) async throws -> [Seen] {
        let records = engine.state.notifications.dropFirst(seenCount)
        seenCount = engine.state.notifications.count
        var seen: [Seen] = []
        for record in records {
            let verified = try await verifier.verifyNotification(record.signedPayload)
            #expect(verified.payload.notificationUUID == record.notificationUUID, sourceLocation: sourceLocation)
            seen.append(Seen(
                type: verified.payload.notificationType, subtype: verified.payload.subtype,
                status: verified.payload.data?.status, transaction: verified.transaction?.payload,
                renewal: verified.renewalInfo?.payload, payload: verified.payload
            ))
        }
        return seen
    }

    /// Type/subtype/status of the new notifications, e.g. `["SUBSCRIBED/INITIAL_BUY 1"]`.
    mutating func newSummaries() async throws -> [String] {
        try await newNotifications().map(\.summary)
    }

    mutating func customer(_ id: String, storefront: String = "USA") throws {
        try engine.createCustomer(id: id, storefront: storefront)
    }

    @discardableResult
    mutating func buy(_ customer: String, _ product: String, offer: String? = nil, quantity: Int = 1) throws -> LifecycleEngine.PurchaseResult {
        try engine.purchase(.init(customerId: customer, productId: product, quantity: quantity, offerId: offer))
    }

    mutating func advance(days: Double) throws {
        try engine.advance(by: days * 86_400)
    }
}
