package import AppStoreModels
import Foundation
import Hummingbird

extension SimulatorAPI {
    // MARK: - Consumption information

    func consumption(_ request: Request, _ context: some RequestContext, _ bundleId: String, version: Int) async throws -> Response {
        let id = try Self.transactionId(context)
        try await requireOwnTransaction(id, bundleId)
        let buffer = try await request.body.collect(upTo: 1 << 20)
        guard let body = try? JSONDecoder().decode(JSONValue.self, from: Data(buffer.readableBytesView)), case .object(let fields) = body else {
            throw AppStoreAPIError.generalBadRequest
        }
        let record = try await simulator.read { (engine) throws(SimulatorError) in try engine.transactionRecord(id) }
        if record.info.inAppOwnershipType == .familyShared { throw AppStoreAPIError.familyTransactionNotSupported }
        if version == 2 {
            try Self.validateConsumptionV2(fields, autoRenewable: record.info.type == .autoRenewable)
        } else {
            try Self.validateConsumptionV1(fields)
        }
        try await simulator.perform { (engine) throws(SimulatorError) in
            engine.recordConsumptionInformation(transactionId: id, body: body)
        }
        return Response(status: .accepted)
    }

    static func validateConsumptionV2(_ fields: [String: JSONValue], autoRenewable: Bool) throws {
        guard case .bool(true) = fields["customerConsented"] else { throw AppStoreAPIError.invalidCustomerConsented }
        let statuses = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER"]
        guard case .string(let delivery) = fields["deliveryStatus"], statuses.contains(delivery) else {
            throw AppStoreAPIError.invalidDeliveryStatus
        }
        guard case .bool = fields["sampleContentProvided"] else { throw AppStoreAPIError.invalidSampleContentProvided }
        var preference: String? = nil
        if let value = fields["refundPreference"] {
            guard case .string(let text) = value, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(text) else {
                throw AppStoreAPIError.invalidRefundPreference
            }
            preference = text
        }
        if let value = fields["consumptionPercentage"] {
            guard !autoRenewable else { throw AppStoreAPIError.consumptionPercentageAutoRenewable }
            guard case .integer(let percentage) = value, (0...100_000).contains(percentage) else {
                throw AppStoreAPIError(4_000_000, "Invalid request. The consumption percentage is out of range.")
            }
            if delivery != "DELIVERED" && percentage != 0 {
                throw AppStoreAPIError(4_000_000, "Invalid request. The consumption percentage must be 0 when undelivered.")
            }
            if preference == "GRANT_PRORATED" && !(1...99_999).contains(percentage) {
                throw AppStoreAPIError(4_000_000, "Invalid request. The consumption percentage is out of range.")
            }
        }
    }

    static func validateConsumptionV1(_ fields: [String: JSONValue]) throws {
        func integer(_ name: String, _ range: ClosedRange<Int64>, _ error: AppStoreAPIError) throws {
            guard case .integer(let value) = fields[name], range.contains(value) else { throw error }
        }
        guard case .bool(true) = fields["customerConsented"] else { throw AppStoreAPIError.invalidCustomerConsented }
        try integer("consumptionStatus", 0...3, .invalidConsumptionStatus)
        try integer("platform", 0...2, .invalidPlatform)
        guard case .bool = fields["sampleContentProvided"] else { throw AppStoreAPIError.invalidSampleContentProvided }
        try integer("deliveryStatus", 0...5, .invalidDeliveryStatus)
        switch fields["appAccountToken"] {
        case .string(let text) where text.isEmpty || UUID(uuidString: text) != nil: break
        default: throw AppStoreAPIError.invalidAppAccountToken
        }
        try integer("accountTenure", 0...7, .invalidAccountTenure)
        try integer("playTime", 0...7, .invalidPlayTime)
        try integer("lifetimeDollarsRefunded", 0...7, .invalidLifetimeDollarsRefunded)
        try integer("lifetimeDollarsPurchased", 0...7, .invalidLifetimeDollarsPurchased)
        try integer("userStatus", 0...4, .invalidUserStatus)
        if fields["refundPreference"] != nil { try integer("refundPreference", 0...3, .invalidRefundPreference) }
    }

    // MARK: - Notification history

    struct NotificationHistoryRequest: Decodable {
        var startDate: Int64?
        var endDate: Int64?
        var notificationType: String?
        var notificationSubtype: String?
        var transactionId: String?
        var originalTransactionId: String?
        var onlyFailures: Bool?

        /// What the request asks for, whatever its JSON looked like (key order, whitespace, escapes, absent fields
        /// that mean their default): a pagination token is valid only for a request with the same meaning.
        func fingerprint() -> String {
            let filter = transactionId ?? originalTransactionId
            let parts: [(String, String)] = [
                ("startDate", startDate.map(String.init) ?? ""), ("endDate", endDate.map(String.init) ?? ""),
                ("notificationType", notificationType ?? ""), ("notificationSubtype", notificationSubtype ?? ""),
                ("transactionId", filter ?? ""), ("onlyFailures", String(onlyFailures ?? false)),
            ]
            return parts.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }
                .joined(separator: "&")
        }
    }

    static func attempts(_ record: NotificationRecord) -> [SendAttemptItem] {
        record.sendAttempts.map { .init(attemptDate: $0.attemptDate, sendAttemptResult: .init(rawValue: $0.sendAttemptResult)) }
    }

    func notificationHistory(_ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let buffer = try await request.body.collect(upTo: 1 << 20)
        let body: NotificationHistoryRequest
        do {
            body = try JSONDecoder().decode(NotificationHistoryRequest.self, from: Data(buffer.readableBytesView))
        } catch {
            // A date that is not an integer of milliseconds is the usual cause.
            let text = String(buffer: buffer)
            if text.contains("\"startDate\"") && !text.contains("\"endDate\"") { throw AppStoreAPIError.invalidEndDate }
            throw text.contains("\"startDate\"") ? AppStoreAPIError.invalidStartDate : AppStoreAPIError.generalBadRequest
        }
        guard let start = body.startDate else { throw AppStoreAPIError.invalidStartDate }
        guard let requestedEnd = body.endDate else { throw AppStoreAPIError.invalidEndDate }
        let (now, environment) = try await simulator.read { ($0.state.now, $0.state.environment) }
        let end = min(requestedEnd, now.epochMilliseconds + 1)
        guard start < requestedEnd else { throw AppStoreAPIError.startDateAfterEndDate }
        let days: Double = environment == .production ? 180 : 30
        guard Double(now.epochMilliseconds - start) <= days * 86_400_000 else { throw AppStoreAPIError.startDateTooFarInPast }
        let transactionFilter = body.transactionId ?? body.originalTransactionId
        if transactionFilter != nil && body.notificationType != nil { throw AppStoreAPIError.multipleFiltersSupplied }
        if let type = body.notificationType, !NotificationType(rawValue: type).isKnown { throw AppStoreAPIError.invalidNotificationType }
        if let subtype = body.notificationSubtype {
            guard body.notificationType != nil, NotificationSubtype(rawValue: subtype).isKnown else {
                throw AppStoreAPIError.invalidNotificationType
            }
        }
        var customer: String? = nil
        if let id = transactionFilter {
            guard APIRequestRules.isTransactionId(id) else { throw AppStoreAPIError.invalidTransactionId }
            customer = try await self.customer(of: id, bundleId)
        }
        let fingerprint = body.fingerprint()
        var after: PageToken? = nil
        if let token = request.uri.queryParameters.get("paginationToken") {
            guard let decoded = PageToken.decode(token), decoded.filters == fingerprint else {
                throw AppStoreAPIError.invalidPaginationToken
            }
            after = decoded
        }
        let response = try await simulator.read { engine -> NotificationHistoryResponse in
            var records = engine.state.notifications.enumerated().filter { _, record in
                let created = record.createdAt.epochMilliseconds
                guard record.bundleId == bundleId, created >= start, created < end, record.testNotificationToken == nil else {
                    return false
                }
                if let customer, record.customerId != customer { return false }
                if let type = body.notificationType, record.notificationType.rawValue != type { return false }
                if let subtype = body.notificationSubtype, record.subtype?.rawValue != subtype { return false }
                if body.onlyFailures == true && !(record.isFailure && !record.sendAttempts.isEmpty) { return false }
                return true
            }
            if let after {
                records = records.filter { index, record in
                    (record.createdAt.epochMilliseconds, index) > (after.date, Int(after.id) ?? -1)
                }
            }
            let page = Array(records.prefix(Self.pageSize))
            let token = page.last.map { PageToken(date: $0.element.createdAt.epochMilliseconds, id: String($0.offset), filters: fingerprint) }
            return NotificationHistoryResponse(
                paginationToken: records.count > page.count ? token?.encoded() : nil,
                hasMore: records.count > page.count,
                notificationHistory: page.map { _, record in
                    NotificationHistoryResponseItem(
                        signedPayload: record.signedPayload, sendAttempts: Self.attempts(record),
                        firstSendAttemptResult: record.sendAttempts.first.map { .init(rawValue: $0.sendAttemptResult) }
                    )
                }
            )
        }
        return try Self.json(response)
    }

    // MARK: - Test notifications

    func requestTestNotification(_ bundleId: String) async throws -> Response {
        guard await hasNotificationURL() else { throw AppStoreAPIError.serverNotificationURLNotFound }
        let token = try await simulator.perform { (engine) throws(SimulatorError) in
            try engine.requestTestNotification(bundleId: bundleId)
        }
        return try Self.json(SendTestNotificationResponse(testNotificationToken: token))
    }

    func testNotificationStatus(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        guard let token = context.parameters.get("testNotificationToken"), !token.isEmpty, token.count <= 256 else {
            throw AppStoreAPIError.invalidTestNotificationToken
        }
        guard
            let record = try await simulator.read({ engine in
                engine.state.notifications.testNotification(token: token).flatMap { $0.bundleId == bundleId ? $0 : nil }
            })
        else {
            throw token.contains("_") ? AppStoreAPIError.testNotificationNotFound : AppStoreAPIError.invalidTestNotificationToken
        }
        guard !record.sendAttempts.isEmpty else { throw AppStoreAPIError.testNotificationNotFound }
        return try Self.json(
            CheckTestNotificationResponse(
                signedPayload: record.signedPayload, sendAttempts: Self.attempts(record),
                firstSendAttemptResult: record.sendAttempts.first.map { .init(rawValue: $0.sendAttemptResult) }
            ))
    }
}

extension LifecycleEngine {
    /// Stores consumption information sent for a transaction (Send Consumption Information).
    package mutating func recordConsumptionInformation(transactionId: String, body: JSONValue) {
        state.consumptionInformation[transactionId] = body
        consumptionInformationReceived[transactionId, default: 0] += 1
    }
}
