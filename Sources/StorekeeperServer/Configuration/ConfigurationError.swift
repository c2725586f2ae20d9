/// A configuration problem, named.
package struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    package var message: String
    /// The setting at fault, as its path (`jobs.leaseSeconds`), when there is one: ``ServerConfiguration/load(path:)``
    /// adds where it is in the file.
    package var setting: String?

    package init(_ message: String, setting: String? = nil) {
        self.message = message
        self.setting = setting
    }

    package var description: String { "configuration: \(message)" }

    /// A number as the file would write it: `2`, not `2.0`.
    static func number(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
    }
}
