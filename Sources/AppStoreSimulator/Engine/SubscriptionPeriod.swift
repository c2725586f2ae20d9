import Foundation

/// The length of a subscription period, as App Store Connect offers them.
package struct SubscriptionPeriod: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
    /// ISO 8601 duration: `P1W`, `P1M`, `P2M`, `P3M`, `P6M` or `P1Y` (offers may also use days, e.g. `P3D`).
    package var rawValue: String

    package init?(rawValue: String) {
        guard Self.parse(rawValue) != nil else { return nil }
        self.rawValue = rawValue
    }

    package static let oneWeek = SubscriptionPeriod(rawValue: "P1W")!
    package static let oneMonth = SubscriptionPeriod(rawValue: "P1M")!
    package static let twoMonths = SubscriptionPeriod(rawValue: "P2M")!
    package static let threeMonths = SubscriptionPeriod(rawValue: "P3M")!
    package static let sixMonths = SubscriptionPeriod(rawValue: "P6M")!
    package static let oneYear = SubscriptionPeriod(rawValue: "P1Y")!

    /// The periods a subscription product may have (1 week to 1 year).
    package static let subscriptionPeriods: [SubscriptionPeriod] = [
        .oneWeek, .oneMonth, .twoMonths, .threeMonths, .sixMonths, .oneYear,
    ]

    package var description: String { rawValue }

    /// The duration as (unit, count), e.g. `P3M` → (.month, 3).
    var components: (unit: Calendar.Component, count: Int) { Self.parse(rawValue)! }

    /// About how many days the period lasts, for comparisons and proration.
    package var approximateDays: Double {
        let (unit, count) = components
        switch unit {
        case .day: return Double(count)
        case .weekOfYear: return Double(count) * 7
        case .month: return Double(count) * 30.4375
        default: return Double(count) * 365.25
        }
    }

    /// The shortest the period can last on the calendar, in whole days: `P3M` is 89 (February to April of a common
    /// year), `P1Y` 365, `P1W` 7. What a fixed access duration for a non-renewing product of this period is, when it
    /// must never outlast the App Store's own end (`entitlements.nonRenewingDurations`).
    package var shortestDays: Int {
        let (unit, count) = components
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        // Every month's first day over four years (a leap year among them): the shortest spans start there.
        let start = calendar.date(from: DateComponents(year: 2025, month: 1, day: 1))!
        var shortest = Int.max
        for month in 0..<48 {
            guard let from = calendar.date(byAdding: .month, value: month, to: start),
                let to = calendar.date(byAdding: unit, value: count, to: from),
                let days = calendar.dateComponents([.day], from: from, to: to).day
            else { continue }
            shortest = min(shortest, days)
        }
        return shortest
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let period = SubscriptionPeriod(rawValue: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "'\(text)' is not an ISO 8601 period such as P1W, P1M or P1Y"
            )
        }
        self = period
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    private static func parse(_ text: String) -> (unit: Calendar.Component, count: Int)? {
        guard text.count >= 3, text.hasPrefix("P"), let count = Int(text.dropFirst().dropLast()), count > 0 else {
            return nil
        }
        switch text.last {
        case "D": return (.day, count)
        case "W": return (.weekOfYear, count)
        case "M": return (.month, count)
        case "Y": return (.year, count)
        default: return nil
        }
    }
}
