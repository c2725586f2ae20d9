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

struct SimulatorRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Play a scenario (a shipped one by name, or a file): in a simulator directory, or on a running simulator.",
        discussion: """
            With --dir the scenario plays in this process on the saved simulator and its notifications are delivered \
            to --notify-url (or the saved URL) after every step. With --url it plays on a running simulator, which \
            delivers to its own URL.
            """
    )

    @Option(help: "A simulator directory (made by `storekeeper simulator init`).")
    var dir: String?

    @Option(help: "A running simulator's base URL, e.g. http://127.0.0.1:8090.")
    var url: String?

    @Option(name: .customLong("notify-url"), help: "With --dir: where to POST notifications.")
    var notifyURL: String?

    @Argument(help: "A shipped scenario's name (see `storekeeper simulator scenarios`) or a scenario file.")
    var scenario: String

    func validate() throws {
        guard (dir == nil) != (url == nil) else { throw ValidationError("give exactly one of --dir and --url") }
    }

    func run() async throws {
        try await reportingFailures {
            let (name, text) = try scenarioText()
            if let url {
                try await ControlOptions(url: url).send(.POST, "/scenarios?name=\(name)", body: text, refusalIsUsage: false)
                return
            }
            let options = DirectoryOptions(dir: dir!)
            let lock = try options.lock(purpose: "storekeeper simulator run --dir")
            defer { lock.release() }
            let simulator = try await options.load(notifyURL: notifyURL)
            let deliverer = NotificationDeliverer(simulator: simulator, logger: Logger(label: "simulator"))
            let before = await simulator.state.notifications.count
            let parsed = try Scenario(name: name, text: text)
            let events = try await ScenarioRunner(simulator: simulator, afterStep: { await deliverer.deliverDue() }).run(parsed)
            for event in events {
                print("\(event.clock.formatted(.iso8601))  line \(event.line): \(event.description)")
            }
            let notifications = await simulator.state.notifications.dropFirst(before)
            print("\nnotifications (\(notifications.count)):")
            for record in notifications {
                let subtype = record.subtype.map { "/\($0)" } ?? ""
                let results = record.sendAttempts.map(\.sendAttemptResult).joined(separator: ", ")
                let result = results.isEmpty ? "not sent (no notification URL)" : results
                print("  \(record.createdAt.formatted(.iso8601))  \(record.notificationType)\(subtype)  \(record.customerId ?? "")  → \(result)")
            }
        }
    }

    /// The scenario's name and text: a shipped one, or a file.
    private func scenarioText() throws -> (String, String) {
        if let shipped = ShippedScenarios.all.first(where: { $0.name == scenario }) { return shipped }
        guard let text = try? String(contentsOfFile: scenario, encoding: .utf8) else {
            throw CLIError(code: "unreadable-input", message: "'\(scenario)' is neither a shipped scenario nor a readable file")
        }
        return (URL(fileURLWithPath: scenario).lastPathComponent, text)
    }
}
