package import Hummingbird
package import Logging

/// The simulator's HTTP server: the App Store Server API at Apple's paths and the control API.
package enum SimulatorApplication {
    /// A router with both APIs; `onChange` runs after control actions (the server delivers due notifications), and
    /// `deliver` (`onChange` unless given) at every stop of a clock advance and after scenario steps, returning once
    /// what is due was attempted.
    package static func buildRouter(
        simulator: Simulator,
        onChange: @escaping @Sendable () async -> Void = {},
        deliver: (@Sendable () async -> Void)? = nil
    ) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        SimulatorAPI(simulator: simulator).addRoutes(to: router)
        SimulatorControlAPI(simulator: simulator, onChange: onChange, deliver: deliver).addRoutes(to: router)
        router.get("/health") { _, _ in "ok" }
        return router
    }

    /// The application, listening on `host:port` (port 0 lets the OS choose), with the notification deliverer
    /// running beside it in the same service group.
    package static func build(
        simulator: Simulator,
        deliverer: NotificationDeliverer,
        host: String = "127.0.0.1",
        port: Int,
        logger: Logger,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            // An action's answer does not wait for its notifications (the deliverer's service sends them at once);
            // a clock advance waits at each stop for what is due then.
            router: buildRouter(
                simulator: simulator, onChange: { await deliverer.deliverSoon() }, deliver: { await deliverer.deliverDue() }
            ),
            configuration: .init(address: .hostname(host, port: port), serverName: "AppStoreSimulator"),
            services: [deliverer, ClockTicker(simulator: simulator, deliverer: deliverer)],
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
            logger: logger
        )
    }
}
