import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird

/// A page position for transaction and refund history and notification history: the sort key of the last item
/// returned, and a fingerprint of the filters (later requests must repeat them).
struct PageToken: Codable {
    var date: Int64
    var id: String
    var filters: String

    func encoded() -> String {
        Base64URL.encode((try? JSONEncoder().encode(self)) ?? Data())
    }

    static func decode(_ text: String) -> PageToken? {
        guard let bytes = try? Base64URL.decode(Substring(text).utf8) else { return nil }
        return try? JSONDecoder().decode(PageToken.self, from: Data(bytes))
    }
}

extension SimulatorAPI {
    // MARK: - Transaction history

    func history(_ request: Request, _ context: some RequestContext, _ bundleId: String, version: Int) async throws -> Response {
        let id = try Self.transactionId(context)
        let query = request.uri.queryParameters
        let filters = HistoryFilters(query: query)
        try filters.validate()
        var after: PageToken? = nil
        if let revision = query.get("revision") {
            guard let token = PageToken.decode(revision), token.filters == filters.fingerprint else {
                throw AppStoreAPIError.invalidRequestRevision
            }
            after = token
        }
        let customer = try await customer(of: id, bundleId)
        let response = try await simulator.read { (engine) throws(SimulatorError) -> HistoryResponse in
            let descending = filters.sort == "DESCENDING"
            var records = engine.transactions(customerId: customer, bundleId: bundleId).filter { record in
                filters.matches(record, catalog: engine.catalog)
                    && (version == 2 || !(record.info.type == .consumable && record.finished && record.info.revocationDate == nil))
            }
            records.sort { lhs, rhs in
                let left = (lhs.modifiedAt.epochMilliseconds, lhs.info.transactionId)
                let right = (rhs.modifiedAt.epochMilliseconds, rhs.info.transactionId)
                return descending ? left > right : left < right
            }
            if let after {
                let key = (after.date, after.id)
                records = records.filter {
                    let item = ($0.modifiedAt.epochMilliseconds, $0.info.transactionId)
                    return descending ? item < key : item > key
                }
            }
            let page = Array(records.prefix(Self.pageSize))
            let last =
                page.last.map { PageToken(date: $0.modifiedAt.epochMilliseconds, id: $0.info.transactionId, filters: filters.fingerprint) }
                ?? after ?? PageToken(date: descending ? Int64.max : 0, id: descending ? "~" : "", filters: filters.fingerprint)
            return HistoryResponse(
                revision: last.encoded(), hasMore: records.count > page.count, bundleId: bundleId,
                appAppleId: engine.catalog.app(bundleId)?.appAppleId, environment: engine.state.environment,
                signedTransactions: try page.map { (record) throws(SimulatorError) in try engine.signTransaction(record.info.transactionId) }
            )
        }
        return try Self.json(response)
    }

    /// Transaction-history filters (APPSTORE-SPEC §1.4): repeated values of one parameter are OR-ed, different
    /// parameters AND-ed.
    struct HistoryFilters {
        var startDate: String?
        var endDate: String?
        var productIds: [String]
        var productTypes: [String]
        var ownership: String?
        var sort: String
        var revoked: String?
        var groups: [String]

        init(query: Parameters) {
            startDate = query.get("startDate")
            endDate = query.get("endDate")
            productIds = query.getAll("productId")
            productTypes = query.getAll("productType")
            ownership = query.get("inAppOwnershipType")
            sort = query.get("sort") ?? "ASCENDING"
            revoked = query.get("revoked") ?? query.get("excludeRevoked").map { $0.lowercased() == "true" ? "false" : "" }
            groups = query.getAll("subscriptionGroupIdentifier")
        }

        /// What the filters mean, whatever their spelling (parameter order, repeated values, `+`/leading zeros in
        /// dates, `TRUE` for `true`, an absent parameter for its default): a revision is valid only for the same.
        var fingerprint: String {
            func list(_ values: [String]) -> String { Set(values).sorted().description }
            let parts = [
                "s=\(startDate.flatMap(Int64.init).map(String.init) ?? "")", "e=\(endDate.flatMap(Int64.init).map(String.init) ?? "")",
                "p=\(list(productIds))", "t=\(list(productTypes))", "o=\(ownership ?? "")", "r=\(revoked?.lowercased() ?? "")",
                "g=\(list(groups))", "sort=\(sort)",
            ]
            return parts.joined(separator: "&")
        }

        static let types = [
            "AUTO_RENEWABLE": ProductType.autoRenewable, "NON_RENEWABLE": .nonRenewing,
            "CONSUMABLE": .consumable, "NON_CONSUMABLE": .nonConsumable,
        ]

        func validate() throws {
            if let startDate, Int64(startDate) == nil { throw AppStoreAPIError.invalidStartDate }
            if let endDate, Int64(endDate) == nil { throw AppStoreAPIError.invalidEndDate }
            if let start = startDate.flatMap(Int64.init), let end = endDate.flatMap(Int64.init), start >= end {
                throw AppStoreAPIError.startDateAfterEndDate
            }
            guard sort == "ASCENDING" || sort == "DESCENDING" else { throw AppStoreAPIError.invalidSort }
            guard productTypes.allSatisfy({ Self.types[$0] != nil }) else { throw AppStoreAPIError.invalidProductType }
            guard productIds.allSatisfy({ !$0.isEmpty }) else { throw AppStoreAPIError.invalidProductId }
            guard groups.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCIIDigit) }) else {
                throw AppStoreAPIError.invalidSubscriptionGroupIdentifier
            }
            if let ownership, !["PURCHASED", "FAMILY_SHARED", "ASSIGNED"].contains(ownership) {
                throw AppStoreAPIError.invalidInAppOwnershipType
            }
            if let revoked, !["true", "false", ""].contains(revoked.lowercased()) { throw AppStoreAPIError.invalidRevoked }
        }

        func matches(_ record: TransactionRecord, catalog: Catalog) -> Bool {
            let info = record.info
            let purchase = info.purchaseDate.epochMilliseconds
            if let start = startDate.flatMap(Int64.init), purchase < start { return false }
            if let end = endDate.flatMap(Int64.init), purchase >= end { return false }
            if !productIds.isEmpty && !productIds.contains(info.productId) { return false }
            if !productTypes.isEmpty && !productTypes.contains(where: { Self.types[$0] == info.type }) { return false }
            if let ownership, info.inAppOwnershipType?.rawValue != ownership { return false }
            if let revoked = revoked?.lowercased(), !revoked.isEmpty, (info.revocationDate != nil) != (revoked == "true") {
                return false
            }
            if !groups.isEmpty && !groups.contains(info.subscriptionGroupIdentifier ?? "") { return false }
            return true
        }
    }

    // MARK: - Refund history

    struct MassExtendBody: Decodable {
        var requestIdentifier: String?
        var extendByDays: Int?
        var extendReasonCode: Int?
        var productId: String?
        var storefrontCountryCodes: [String]?
    }

    func refundHistory(_ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        var after: PageToken? = nil
        if let revision = request.uri.queryParameters.get("revision") {
            guard let token = PageToken.decode(revision), token.filters == "refunds" else {
                throw AppStoreAPIError.invalidRequestRevision
            }
            after = token
        }
        let customer = try await customer(of: id, bundleId)
        let body = try await simulator.read { (engine) throws(SimulatorError) -> RefundHistoryResponse in
            var refunds = engine.transactions(customerId: customer, bundleId: bundleId).filter {
                $0.info.revocationDate != nil && $0.info.revocationType != .familyRevoke
            }.sorted {
                ($0.info.revocationDate!.epochMilliseconds, $0.info.transactionId) < (
                    $1.info.revocationDate!.epochMilliseconds, $1.info.transactionId
                )
            }
            if let after {
                refunds = refunds.filter { ($0.info.revocationDate!.epochMilliseconds, $0.info.transactionId) > (after.date, after.id) }
            }
            let page = Array(refunds.prefix(Self.pageSize))
            let last =
                page.last.map { PageToken(date: $0.info.revocationDate!.epochMilliseconds, id: $0.info.transactionId, filters: "refunds") }
                ?? after ?? PageToken(date: 0, id: "", filters: "refunds")
            return RefundHistoryResponse(
                signedTransactions: try page.map { (record) throws(SimulatorError) in try engine.signTransaction(record.info.transactionId) },
                revision: last.encoded(), hasMore: refunds.count > page.count
            )
        }
        return try Self.json(body)
    }

    func refundLookupV1(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        let customer = try await customer(of: id, bundleId)
        let signed = try await simulator.read { (engine) throws(SimulatorError) -> [String] in
            let refunds = engine.transactions(customerId: customer, bundleId: bundleId)
                .filter { $0.info.revocationDate != nil && $0.info.revocationType != .familyRevoke }
                .sorted { $0.info.revocationDate! > $1.info.revocationDate! }
                .prefix(50)
            return try refunds.map { (record) throws(SimulatorError) in try engine.signTransaction(record.info.transactionId) }
        }
        return try Self.json(RefundLookupResponse(signedTransactions: signed))
    }

    // MARK: - Mass extension

    func massExtend(_ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let body = try await Self.body(request, as: MassExtendBody.self)
        guard let days = body.extendByDays, APIRequestRules.extendByDays.contains(days) else { throw AppStoreAPIError.invalidExtendByDays }
        guard let reason = body.extendReasonCode, APIRequestRules.extendReasonCodes.contains(reason) else {
            throw AppStoreAPIError.invalidExtendReasonCode
        }
        guard let requestId = body.requestIdentifier, APIRequestRules.isRequestIdentifier(requestId) else {
            throw AppStoreAPIError.invalidRequestIdentifier
        }
        guard let productId = body.productId,
            try await simulator.read({ $0.catalog.product(productId)?.bundleId == bundleId && $0.catalog.product(productId)?.type == .autoRenewable })
        else { throw AppStoreAPIError.invalidProductId }
        if let codes = body.storefrontCountryCodes {
            guard !codes.isEmpty else { throw AppStoreAPIError.invalidEmptyStorefrontCountryCodeList }
            guard codes.allSatisfy({ Storefront.find($0) != nil }) else { throw AppStoreAPIError.invalidStorefrontCountryCode }
        }
        try await simulator.perform { (engine) throws(SimulatorError) in
            try engine.extendAll(
                productId: productId, bundleId: bundleId, days: days, requestIdentifier: requestId,
                storefronts: body.storefrontCountryCodes
            )
        }
        return try Self.json(MassExtendRenewalDateResponse(requestIdentifier: requestId))
    }

    func massExtendStatus(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        guard let productId = context.parameters.get("productId"), !productId.isEmpty else {
            throw AppStoreAPIError.invalidProductId
        }
        guard let requestId = context.parameters.get("requestIdentifier"), APIRequestRules.isRequestIdentifier(requestId) else {
            throw AppStoreAPIError.invalidRequestIdentifier
        }
        guard let request = try await simulator.read({ $0.state.massExtensions[productId + "|" + requestId] }),
            request.bundleId == bundleId
        else { throw AppStoreAPIError.statusRequestNotFound }
        let complete = request.completeDate != nil
        return try Self.json(
            MassExtendRenewalDateStatusResponse(
                requestIdentifier: requestId, complete: complete, completeDate: request.completeDate,
                succeededCount: complete ? request.succeededCount : nil, failedCount: complete ? request.failedCount : nil
            ))
    }
}
