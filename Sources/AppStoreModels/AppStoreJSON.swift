public import Foundation

/// JSON coding as the App Store writes it: dates are integer UNIX epoch milliseconds.
public enum AppStoreJSON {
    /// A decoder for App Store payloads and API bodies.
    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let milliseconds = try container.decode(Int64.self)
            return Date(epochMilliseconds: milliseconds)
        }
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
