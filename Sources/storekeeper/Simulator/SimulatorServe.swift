import AppStoreModels
import AppStoreSimulator
import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOHTTP1
import StorekeeperCore
import StorekeeperServer

struct SimulatorServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the App Store Server API and the control API, and deliver notifications."
    )

    @OptionGroup var directory: DirectoryOptions

    @Option(help: "Port on 127.0.0.1 (0: any free port).")
    var port: Int = 8090

    @Option(name: .customLong("notify-url"), help: "Where to POST notifications (saved in the simulator).")
    var notifyURL: String?

    @Option(help: "Sandbox or Production (changes the saved environment).")
    var environment: String?

    @Option(help: "manual: the clock moves only when told; running: it follows real time (renewals at the saved renewal rate).")
    var clock: String?

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be 0 to 65535 (0: any free port), not \(port)") }
    }

    func run() async throws {
        try await reportingFailures {
            let lock = try directory.lock(purpose: "storekeeper simulator serve")
            defer { lock.release() }
            let simulator = try await directory.load(notifyURL: notifyURL)
            if let environment {
                let parsed = try parseEnvironment(environment)
                _ = try await simulator.perform { engine in engine.setEnvironment(parsed) }
            }
            if let clock {
                guard clock == "manual" || clock == "running" else {
                    throw CLIError(code: "invalid-option", message: "--clock must be manual or running, not '\(clock)'")
                }
                _ = try await simulator.perform { engine in engine.setClockRunning(clock == "running") }
            }
            var logger = Logger(label: "simulator")
            logger.logLevel = .info
            let deliverer = NotificationDeliverer(simulator: simulator, logger: logger)
            let app = SimulatorApplication.build(
                simulator: simulator, deliverer: deliverer, port: port, logger: logger,
                onServerRunning: { port in
                    // Written at once (print is buffered when stdout is a pipe): a supervisor reads the port from it.
                    try? FileHandle.standardOutput.write(
                        contentsOf:
                            Data(
                                "App Store simulator on http://127.0.0.1:\(port) (API: /inApps/…, control: /simulator/v1/…)\n".utf8
                            ))
                }
            )
            try await app.runService()
            // Every change was saved as it was made: said, so an operator who stopped it knows nothing waits.
            try? FileHandle.standardOutput.write(contentsOf: Data("App Store simulator stopped; its state is saved in \(directory.dir)\n".utf8))
        }
    }
}
