import AppStoreModels
package import Foundation
import Synchronization

/// An outgoing event's ID: `evt_` + 26 characters of Crockford base32 (a ULID): 48 bits of milliseconds since 1970,
/// then 80 bits that are random for the first ID of a millisecond and count up from it for the next ones. IDs sort
/// as text in the order they were made on one instance, and by time across instances; two instances never make the
/// same one (80 random bits). The receiver deduplicates by it (`webhook-id`).
package struct EventID: Hashable, Comparable, Sendable, CustomStringConvertible {
    package static let prefix = "evt_"
    /// What an ID looks like, for errors that refuse one.
    package static let shape = "evt_ and 26 characters of Crockford's base32 (no I, L, O or U), the first of them 0 to 7"
    static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    /// The 128 bits, high then low.
    package let high: UInt64
    package let low: UInt64

    package init(milliseconds: UInt64, random: (high: UInt16, low: UInt64)) {
        high = (milliseconds & 0xFFFF_FFFF_FFFF) << 16 | UInt64(random.high)
        low = random.low
    }

    /// Reads `evt_` + 26 base32 characters (case-insensitive); `nil` for anything else.
    package init?(_ text: String) {
        guard text.hasPrefix(Self.prefix) else { return nil }
        let digits = Array(text.utf8.dropFirst(Self.prefix.count))
        guard digits.count == 26 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, byte) in digits.enumerated() {
            let upper = byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte
            guard let value = Self.alphabet.firstIndex(of: upper) else { return nil }
            // 26 × 5 = 130 bits: the first character holds only 3.
            if index == 0 && value > 7 { return nil }
            high = high << 5 | low >> 59
            low = low << 5 | UInt64(value)
        }
        self.high = high
        self.low = low
    }

    /// When it was made.
    /// The smallest ID made at `date`: every ID made before it sorts lower (retention deletes by ID, which the
    /// unique index on IDs serves, instead of keeping an index on dates).
    package static func first(at date: Date) -> EventID {
        EventID(milliseconds: UInt64(max(0, date.epochMilliseconds)), random: (0, 0))
    }

    package var date: Date { Date(timeIntervalSince1970: Double(high >> 16) / 1000) }

    package var description: String {
        var digits = [UInt8](repeating: 0, count: 26)
        var high = self.high
        var low = self.low
        for index in stride(from: 25, through: 0, by: -1) {
            digits[index] = Self.alphabet[Int(low & 31)]
            low = low >> 5 | (high & 31) << 59
            high >>= 5
        }
        return Self.prefix + String(decoding: digits, as: UTF8.self)
    }

    package static func < (lhs: EventID, rhs: EventID) -> Bool { (lhs.high, lhs.low) < (rhs.high, rhs.low) }
}

/// Makes ``EventID``s that increase on this instance, even when the clock stands still or steps back.
package final class EventIDGenerator: Sendable {
    private let last = Mutex<EventID?>(nil)
    private let now: @Sendable () -> Date

    package init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
    }

    package func next() -> EventID {
        let milliseconds = UInt64(max(0, now().timeIntervalSince1970 * 1000))
        return last.withLock { last in
            let id: EventID
            if let previous = last, previous.high >> 16 >= milliseconds {
                // The same millisecond (or a clock that stepped back): one more than the last, in its millisecond.
                let (low, carry) = previous.low.addingReportingOverflow(1)
                id = EventID(high: previous.high &+ (carry ? 1 : 0), low: low)
            } else {
                var random = SystemRandomNumberGenerator()
                // The top bit of the random part left clear: a millisecond has 2⁷⁹ IDs to count through.
                id = EventID(milliseconds: milliseconds, random: (UInt16.random(in: 0...0x7FFF, using: &random), random.next()))
            }
            last = id
            return id
        }
    }
}

extension EventID {
    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }
}
