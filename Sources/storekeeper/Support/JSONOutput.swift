import AppStoreModels
import Foundation

/// Pretty, key-sorted JSON on standard output; dates as epoch milliseconds like the App Store's own JSON.
enum JSONOutput {
    static func print(_ value: some Encodable) throws {
        let data = try AppStoreJSON.makeEncoder(prettyPrinted: true).encode(value)
        try? FileHandle.standardOutput.write(contentsOf: data + Data("\n".utf8))
    }

    /// A model as a JSON value, so it can be placed in a larger report.
    static func value(_ model: some Encodable) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: AppStoreJSON.makeEncoder().encode(model))
    }
}
