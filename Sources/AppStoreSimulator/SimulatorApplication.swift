public import Hummingbird
public import Logging

/// The simulator's HTTP server: the App Store Server API at Apple's paths and the control API.
public enum SimulatorApplication {
    /// A router with both APIs; `onChange` runs after control actions (the server delivers due notifications).
    public static func buildRouter(
        simulator: Simulator,
        onChange: @escaping @Sendable () async -> Void = {}
    ) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        SimulatorAPI(simulator: simulator).addRoutes(to: router)
        SimulatorControlAPI(simulator: simulator, onChange: onChange).addRoutes(to: router)
        router.get("/health") { _, _ in "ok" }
        return router
    }

    /// The application, listening on `host:port` (port 0 lets the OS choose).
    public static func build(
        simulator: Simulator,
        host: String = "127.0.0.1",
        port: Int,
        logger: Logger,
        onChange: @escaping @Sendable () async -> Void = {}
    ) -> some ApplicationProtocol {
        Application(
            router: buildRouter(simulator: simulator, onChange: onChange),
            configuration: .init(address: .hostname(host, port: port), serverName: "AppStoreSimulator"),
            logger: logger
        )
    }
}
