/// `revocationType` (API 1.19).
public struct RevocationType: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let refundFull: Self = "REFUND_FULL"
    public static let refundProrated: Self = "REFUND_PRORATED"
    public static let familyRevoke: Self = "FAMILY_REVOKE"
    /// API 1.22.
    public static let assignmentRevoke: Self = "ASSIGNMENT_REVOKE"

    public static let knownValues: [Self] = [.refundFull, .refundProrated, .familyRevoke, .assignmentRevoke]
}
