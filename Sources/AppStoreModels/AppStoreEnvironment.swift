/// The App Store environment that signed a payload (`environment`, or `receiptType` in an app transaction).
public struct AppStoreEnvironment: OpenStringWireValue {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Live App Store purchases.
    public static let production: Self = "Production"
    /// App Store sandbox purchases (sandbox Apple Accounts, TestFlight).
    public static let sandbox: Self = "Sandbox"
    /// Xcode StoreKit testing. Apple's libraries skip signature checks here; Storekeeper does not.
    public static let xcode: Self = "Xcode"
    /// Local unit testing in Apple's libraries.
    public static let localTesting: Self = "LocalTesting"

    public static let knownValues: [Self] = [.production, .sandbox, .xcode, .localTesting]
}
