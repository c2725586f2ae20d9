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

/// `storekeeper simulator …`: a local App Store.
struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "A local App Store: sells, signs, renews, refunds and notifies.",
        subcommands: [
            SimulatorServe.self, SimulatorInit.self, SimulatorRun.self, SimulatorScenarios.self,
            SimulatorCustomer.self, SimulatorBuy.self, SimulatorAdvance.self, SimulatorControl.self,
        ],
        defaultSubcommand: SimulatorServe.self
    )
}

/// Options shared by commands that work on a simulator directory.
struct DirectoryOptions: ParsableArguments {
    @Option(help: "The simulator's directory (made by `storekeeper simulator init`).")
    var dir: String

    init() {}

    init(dir: String) {
        self.dir = dir
    }

    var directory: SimulatorDirectory { SimulatorDirectory(URL(fileURLWithPath: dir)) }

    /// Takes the directory's lock (`DIR/simulator.lock`) for the process's life: one simulator per directory, since
    /// two would each keep their own clock and counters and corrupt the state they share.
    func lock(purpose: String) throws -> ExclusiveLock {
        guard FileManager.default.fileExists(atPath: directory.databaseFile.path) || FileManager.default.fileExists(atPath: directory.stateFile.path)
        else {
            throw CLIError(code: "no-such-simulator", message: "no simulator in \(dir): make one with `storekeeper simulator init \(dir)`")
        }
        do {
            return try ExclusiveLock(path: directory.url.appendingPathComponent("simulator.lock").path, purpose: purpose)
        } catch let held as ExclusiveLock.Held {
            throw CLIError(
                code: "simulator-in-use",
                message: "the simulator in \(dir) is in use by \(held.holder): one simulator per directory; "
                    + "play a scenario on the running one with `storekeeper simulator run --url URL …`"
            )
        }
    }

    /// Loads the simulator, applying a notification URL if one is given.
    func load(notifyURL: String?) async throws -> Simulator {
        let simulator = try Simulator(directory: directory)
        if let notifyURL {
            guard URL(string: notifyURL)?.scheme?.hasPrefix("http") == true else {
                throw CLIError(code: "invalid-option", message: "--notify-url must be an http(s) URL")
            }
            _ = try await simulator.perform { engine in engine.setNotificationURL(notifyURL) }
        }
        return simulator
    }
}
