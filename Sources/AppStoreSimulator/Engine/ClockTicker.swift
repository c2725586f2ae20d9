import Foundation
import ServiceLifecycle

/// While the simulator's clock is running, moves it forward by the real time that passed, once a second, so that
/// renewals happen on their own (at the sandbox rates, a monthly plan renews every few minutes). It moves the clock
/// like every other advance (``Simulator/advance(to:deliver:)``): each renewal and delivery at its own time.
package struct ClockTicker: Service {
    let simulator: Simulator
    let deliverer: NotificationDeliverer
    let interval: Duration

    package init(simulator: Simulator, deliverer: NotificationDeliverer, interval: Duration = .seconds(1)) {
        self.simulator = simulator
        self.deliverer = deliverer
        self.interval = interval
    }

    package func run() async throws {
        await cancelWhenGracefulShutdown {
            var last = ContinuousClock.now
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                let now = ContinuousClock.now
                let elapsed = now - last
                last = now
                guard await simulator.clockRunning else { continue }
                let seconds = elapsed / .seconds(1)
                try? await simulator.advance(by: seconds) { [deliverer] in await deliverer.deliverDue() }
            }
        }
    }
}
