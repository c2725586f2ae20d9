/// Why the simulator refused an action. Nothing changes when it does.
package struct SimulatorError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable, machine-readable reason.
    package struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package var description: String { rawValue }

        /// The catalog is inconsistent or incomplete.
        package static let invalidCatalog = Code(rawValue: "invalid-catalog")
        /// A request's field is missing or out of range.
        package static let invalidRequest = Code(rawValue: "invalid-request")
        /// No such customer, product, transaction or family.
        package static let notFound = Code(rawValue: "not-found")
        /// The action does not apply to the current state (e.g. refunding a refunded transaction).
        package static let conflict = Code(rawValue: "conflict")
        /// The simulator's state directory could not be read or written.
        package static let storage = Code(rawValue: "storage")
    }

    package var code: Code
    package var message: String
    /// The App Store Server API error code Apple answers with in the same situation, if any (e.g. 4030005).
    package var apiErrorCode: Int?

    package init(_ code: Code, _ message: String, apiErrorCode: Int? = nil) {
        self.code = code
        self.message = message
        self.apiErrorCode = apiErrorCode
    }

    package var description: String { "\(code): \(message)" }
}
