package import AppStoreModels
package import Foundation

/// An entitlement support granted a customer for a while, outside the App Store: it counts in their entitlements
/// until it expires or is revoked, with `source` `promotional` and its grant's ID instead of a product and a
/// transaction, so nothing reading the answer can take it for a purchase. Kept per app and environment; the audit log
/// records who granted and revoked it and why, the outbox its `promotional.*` events.
package struct PromotionalGrant: Codable, Hashable, Sendable {
    /// A lowercase UUID the server issues.
    package var id: String
    package var bundleId: String
    package var environment: AppStoreEnvironment
    package var customerId: String
    /// The entitlement's name, as products grant them (`EntitlementConfiguration/productEntitlements`).
    package var entitlement: String
    package var grantedAt: Date
    package var expiresDate: Date
    /// The support key's name; the reason given. (A ledger read for entitlements may leave them out.)
    package var grantedBy: String?
    package var reason: String?
    package var revokedAt: Date?
    package var revokedBy: String?
    package var revokeReason: String?

    package init(
        id: String, customer: CustomerKey, entitlement: String, grantedAt: Date, expiresDate: Date, grantedBy: String?, reason: String?,
        revokedAt: Date? = nil, revokedBy: String? = nil, revokeReason: String? = nil
    ) {
        self.id = id
        bundleId = customer.bundleId
        environment = customer.environment
        customerId = customer.customerId
        self.entitlement = entitlement
        self.grantedAt = grantedAt
        self.expiresDate = expiresDate
        self.grantedBy = grantedBy
        self.reason = reason
        self.revokedAt = revokedAt
        self.revokedBy = revokedBy
        self.revokeReason = revokeReason
    }

    package var customer: CustomerKey { CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId) }

    /// Whether it grants its entitlement at `now`: not revoked, not expired.
    package func isActive(at now: Date) -> Bool { revokedAt == nil && expiresDate > now }

    /// The `source` of the entitlements grants give (a purchase's is a notification UUID, `app` or the API's).
    package static let source = "promotional"

    /// The most grants a customer may have active at once in an app and environment: each is listed in their state,
    /// and every event carries the state.
    package static let activeLimit = 20

    /// The longest grant: ten years.
    package static let longest: TimeInterval = 3_650 * 86_400

    /// Why an entitlement name cannot be granted, or `nil`: 1-128 letters, digits and `.`, `_`, `-`, `:` (what product IDs
    /// and configured entitlement names are made of), one of the app's configured names when it configures any.
    package static func problem(entitlement name: String, configured: Set<String>) -> String? {
        guard (1...128).contains(name.utf8.count),
            name.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || ".-_:".unicodeScalars.contains($0)) })
        else {
            return "entitlement \(UntrustedText.quoted(name, limit: 64)) is not an entitlement name (1-128 letters, digits, '.', '_', '-', ':')"
        }
        guard configured.isEmpty || configured.contains(name) else {
            return
                "entitlement '\(name)' is not a name entitlements.productEntitlements gives (\(configured.sorted().joined(separator: ", "))): a grant names a configured entitlement"
        }
        return nil
    }
}

/// What came of granting or revoking a promotional entitlement. Either way the audit log has a record of it (its ID
/// here; 0 before the store records it).
package enum PromotionalGrantOutcome: Sendable, Hashable {
    /// Done: the grant as it now stands.
    case done(PromotionalGrant, actionId: Int64)
    /// Refused, changing nothing but the audit log.
    case refused(Refusal, actionId: Int64)

    package enum Refusal: Sendable, Hashable {
        /// No grant with that ID for that customer in that app and environment.
        case unknownGrant
        /// The grant was revoked already (when, and by whom).
        case alreadyRevoked(PromotionalGrant)
        /// The grant has expired: there is nothing left to revoke.
        case expired(PromotionalGrant)
        /// The customer has ``PromotionalGrant/activeLimit`` active grants already.
        case tooMany(limit: Int)

        /// The audit record's word for it.
        package var code: String {
            switch self {
            case .unknownGrant: "unknown-grant"
            case .alreadyRevoked: "grant-revoked"
            case .expired: "grant-expired"
            case .tooMany: "too-many-grants"
            }
        }
    }

    /// The same outcome naming the audit record `id`.
    package func recorded(as id: Int64) -> PromotionalGrantOutcome {
        switch self {
        case .done(let grant, _): .done(grant, actionId: id)
        case .refused(let refusal, _): .refused(refusal, actionId: id)
        }
    }
}

/// A change of a promotional grant, as a store takes it (``LedgerStore/changeGrant(_:audit:)``).
package enum PromotionalGrantChange: Sendable, Hashable {
    /// Grant this (a new grant).
    case grant(PromotionalGrant)
    /// Revoke the customer's grant `id` at `at`, by `keyName`, for `reason`.
    case revoke(id: String, customer: CustomerKey, at: Date, keyName: String, reason: String)

    /// The unit of work that makes it.
    package var step: LedgerStep<PromotionalGrantOutcome> {
        switch self {
        case .grant(let grant): LedgerUnitOfWork.granting(grant)
        case .revoke(let id, let customer, let at, let keyName, let reason):
            LedgerUnitOfWork.revoking(grant: id, of: customer, at: at, keyName: keyName, reason: reason)
        }
    }
}

extension LedgerUnitOfWork {
    /// Grants `grant`: written with the customer's events (`promotional.granted`), in one transaction.
    package static func granting(_ grant: PromotionalGrant) -> LedgerStep<PromotionalGrantOutcome> {
        changingGrant(grant.customer) { grants, now in
            let active = grants.values.filter { $0.isActive(at: now) }.count
            guard active < PromotionalGrant.activeLimit else { return .failure(RefusedGrantChange(.tooMany(limit: PromotionalGrant.activeLimit))) }
            return .success(grant)
        }
    }

    /// Revokes the customer's grant `id` at `at` (by `keyName`, for `reason`): its entitlement ends at once
    /// (`promotional.revoked`).
    package static func revoking(
        grant id: String, of customer: CustomerKey, at: Date, keyName: String, reason: String
    ) -> LedgerStep<PromotionalGrantOutcome> {
        changingGrant(customer) { grants, now in
            guard var grant = grants[id] else { return .failure(RefusedGrantChange(.unknownGrant)) }
            guard grant.revokedAt == nil else { return .failure(RefusedGrantChange(.alreadyRevoked(grant))) }
            guard grant.expiresDate > now else { return .failure(RefusedGrantChange(.expired(grant))) }
            grant.revokedAt = at
            grant.revokedBy = keyName
            grant.revokeReason = reason
            return .success(grant)
        }
    }

    /// Reads the customer's ledger (their grants with it; the state locked on a backend with concurrent writers),
    /// applies `change` to their grants, writes the grant and their events. The action ID of the outcome is 0: the
    /// backend records the audit record in the same transaction and sets it.
    private static func changingGrant(
        _ customer: CustomerKey, _ change: @escaping ([String: PromotionalGrant], Date) -> Result<PromotionalGrant, RefusedGrantChange>
    ) -> LedgerStep<PromotionalGrantOutcome> {
        .readCustomers(OutboxReads(customers: [customer])) { read in
            let before = onlyApp(read.ledgers[customer] ?? Ledger(), bundleId: customer.bundleId)
            let grant: PromotionalGrant
            switch change(before.grants, read.now) {
            case .success(let changed): grant = changed
            case .failure(let refused): return .done(.refused(refused.refusal, actionId: 0))
            }
            var after = before
            after.grants[grant.id] = grant
            let done = LedgerStep<PromotionalGrantOutcome>.done(.done(grant, actionId: 0))
            let changes = LedgerChanges(from: before, to: after)
            guard read.enabled else { return .write(changes, then: done) }
            let (drafts, record) = EventDerivation.derive(
                .init(customer: customer, stored: read.stored[customer], ledgers: [before, after], causes: [EventCause(.api, id: grant.id)]),
                configuration: read.configuration, at: read.now)
            var append = OutboxAppend()
            append.drafts = drafts
            if let record, record != read.stored[customer] { append.records = [record] }
            return .write(changes, then: append.isEmpty ? done : .appendEvents(append, then: done))
        }
    }
}

/// A grant change refused before anything is written.
private struct RefusedGrantChange: Error {
    var refusal: PromotionalGrantOutcome.Refusal
    init(_ refusal: PromotionalGrantOutcome.Refusal) { self.refusal = refusal }
}
