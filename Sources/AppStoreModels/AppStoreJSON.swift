public import Foundation

/// JSON coding as the App Store writes it: dates are integer UNIX epoch milliseconds.
public enum AppStoreJSON {
    /// A decoder for App Store payloads and API bodies (dates as UNIX epoch milliseconds; Foundation's built-in
    /// strategy, which reads an integer exactly and is several times faster than a custom closure).
    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }

    /// An encoder that writes dates as integer epoch milliseconds, keys sorted.
    public static func makeEncoder(prettyPrinted: Bool = false) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.epochMilliseconds)
        }
        encoder.outputFormatting = prettyPrinted ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys]
        return encoder
    }
}

extension Date {
    /// A date from UNIX epoch milliseconds, the App Store's wire format.
    public init(epochMilliseconds: Int64) {
        self.init(timeIntervalSince1970: Double(epochMilliseconds) / 1000)
    }

    /// This date as UNIX epoch milliseconds, rounded to the nearest millisecond.
    public var epochMilliseconds: Int64 {
        Int64((timeIntervalSince1970 * 1000).rounded())
    }
}
