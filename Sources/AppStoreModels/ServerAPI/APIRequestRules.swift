import Foundation

/// What the App Store Server API accepts in a request (APPSTORE-SPEC §1.4), as rules both sides apply: the client
/// before sending (an error that names the field), the simulator on receiving (Apple's error code).
public enum APIRequestRules {
    /// Transaction IDs are 1-20 decimal digits.
    public static func isTransactionId(_ id: String) -> Bool {
        (1...20).contains(id.utf8.count) && id.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    /// `extendByDays`: 1 to 90.
    public static let extendByDays: ClosedRange<Int> = 1...90
    /// `extendReasonCode`: 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
    public static let extendReasonCodes: ClosedRange<Int> = 0...3

    /// `requestIdentifier`: 1 to 128 characters.
    public static func isRequestIdentifier(_ identifier: String) -> Bool { (1...128).contains(identifier.count) }

    /// A storefront: an ISO 3166-1 alpha-3 code, three upper-case letters.
    public static func isStorefrontCountryCode(_ code: String) -> Bool {
        code.utf8.count == 3 && code.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }
    }

    /// `consumptionPercentage`: milliunits, 0 to 100,000.
    public static let consumptionPercentage: ClosedRange<Int> = 0...100_000

    /// Why a Get Notification History body would be refused, or `nil`: the dates in order, not both a transaction ID
    /// and a type, a subtype only with its type, a transaction ID of digits.
    public static func refusal(of request: NotificationHistoryRequest) -> (code: APIErrorCode, reason: String)? {
        guard request.startDate < request.endDate else { return (.startDateAfterEndDate, "startDate must come before endDate") }
        if request.transactionId != nil && request.notificationType != nil {
            return (.multipleFiltersSupplied, "give either transactionId or notificationType, not both")
        }
        if request.notificationSubtype != nil && request.notificationType == nil {
            return (.invalidNotificationType, "notificationSubtype needs notificationType")
        }
        if let id = request.transactionId, !isTransactionId(id) { return (.invalidTransactionId, "transactionId must be 1-20 digits") }
        return nil
    }
}
