/// Why the simulator refused an action. Nothing changes when it does.
public struct SimulatorError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable, machine-readable reason.
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The catalog is inconsistent or incomplete.
        public static let invalidCatalog = Code(rawValue: "invalid-catalog")
        /// A request's field is missing or out of range.
        public static let invalidRequest = Code(rawValue: "invalid-request")
        /// No such customer, product, transaction or family.
        public static let notFound = Code(rawValue: "not-found")
        /// The action does not apply to the current state (e.g. refunding a refunded transaction).
        public static let conflict = Code(rawValue: "conflict")
        /// The simulator's state directory could not be read or written.
        public static let storage = Code(rawValue: "storage")
    }

    public var code: Code
    public var message: String
    /// The App Store Server API error code Apple answers with in the same situation, if any (e.g. 4030005).
    public var apiErrorCode: Int?

    public init(_ code: Code, _ message: String, apiErrorCode: Int? = nil) {
        self.code = code
        self.message = message
        self.apiErrorCode = apiErrorCode
    }

    public var description: String { "\(code): \(message)" }
}
