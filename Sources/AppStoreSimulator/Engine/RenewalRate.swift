package import Foundation

/// How long subscription periods last on the simulator's clock.
///
/// `.realTime` uses calendar lengths (a month is a month). The accelerated rates are the sandbox's (APPSTORE-SPEC
/// §4.1): at `.sandbox5Minutes`, the default sandbox speed, a month lasts 5 minutes, a year an hour, billing retry
/// 10 minutes and Billing Grace Period 3 minutes for weekly plans and 5 minutes for others.
package enum RenewalRate: String, Codable, Sendable, CaseIterable {
    case realTime = "real-time"
    case sandbox3Minutes = "3-minutes"
    case sandbox5Minutes = "5-minutes"
    case sandbox15Minutes = "15-minutes"
    case sandbox30Minutes = "30-minutes"
    case sandbox1Hour = "1-hour"

    private static let calendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    /// Minutes per period at each accelerated rate: 1 week, 1, 2, 3, 6 months, 1 year.
    private var minutes: [Double]? {
        switch self {
        case .realTime: return nil
        case .sandbox3Minutes: return [3, 3, 6, 9, 18, 36]
        case .sandbox5Minutes: return [3, 5, 10, 15, 30, 60]
        case .sandbox15Minutes: return [5, 15, 30, 45, 90, 180]
        case .sandbox30Minutes: return [10, 30, 60, 90, 180, 360]
        case .sandbox1Hour: return [15, 60, 120, 180, 360, 720]
        }
    }

    /// How long `period` lasts at its shortest: on the calendar, ``SubscriptionPeriod/shortestDays``; at a sandbox
    /// rate, the rate's length of it. A fixed access duration for a non-renewing product that never outlasts
    /// ``end(of:count:from:)``.
    package func shortestLength(of period: SubscriptionPeriod) -> TimeInterval {
        guard minutes != nil else { return TimeInterval(period.shortestDays * 86_400) }
        let start = Date(timeIntervalSince1970: 0)
        return end(of: period, from: start).timeIntervalSince(start)
    }

    /// The end of `count` periods starting at `start`.
    package func end(of period: SubscriptionPeriod, count: Int = 1, from start: Date) -> Date {
        guard let minutes else {
            let (unit, amount) = period.components
            return Self.calendar.date(byAdding: unit, value: amount * count, to: start)!
        }
        let index = SubscriptionPeriod.subscriptionPeriods.firstIndex(of: period)
        let perPeriod: Double
        if let index {
            perPeriod = minutes[index]
        } else {
            // Offer periods in days: scale from the monthly rate.
            perPeriod = minutes[1] * period.approximateDays / 30.4375
        }
        return start.addingTimeInterval(perPeriod * 60 * Double(count))
    }

    /// `days` of real time (grace, retry, extensions) on this rate's clock.
    package func duration(days: Double) -> TimeInterval {
        guard let minutes else { return days * 86_400 }
        return minutes[1] * 60 * days / 30.4375
    }

    /// Billing retry lasts up to 60 days (10 minutes at the default sandbox rate).
    package var billingRetryDuration: TimeInterval {
        self == .realTime ? 60 * 86_400 : duration(days: 60)
    }

    /// Billing Grace Period of `days` (3, 16 or 28; weekly plans at most 6) on this clock.
    package func gracePeriod(days: Int, period: SubscriptionPeriod) -> TimeInterval {
        let capped = period == .oneWeek ? min(days, 6) : days
        switch self {
        case .realTime: return Double(capped) * 86_400
        case .sandbox5Minutes: return (period == .oneWeek ? 3 : 5) * 60
        default: return duration(days: Double(capped))
        }
    }
}
