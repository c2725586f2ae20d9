import AppStoreModels
import AppStoreServerAPI
import AppStoreSimulator
import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOHTTP1
import StorekeeperCore
import StorekeeperServer

struct SimulatorScenarios: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "scenarios", abstract: "List the shipped scenarios.")

    func run() {
        for (name, text) in ShippedScenarios.all {
            let summary = text.split(separator: "\n").first.map { $0.drop { $0 == "#" || $0 == " " } } ?? ""
            print("\(name.padding(toLength: 24, withPad: " ", startingAt: 0)) \(summary)")
        }
    }
}

// MARK: - Actions on a running simulator, through its control API

/// Options for talking to a running simulator.
struct ControlOptions: ParsableArguments {
    @Option(help: "The running simulator's base URL (default: $STOREKEEPER_SIMULATOR_URL, else http://127.0.0.1:8090).")
    var url: String = ProcessInfo.processInfo.environment["STOREKEEPER_SIMULATOR_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://127.0.0.1:8090"

    init() {}

    init(url: String) {
        self.url = url
    }

    /// Sends a control request and prints the answer. A 400 or 404 is the command's own mistake (`simulator-400`,
    /// `simulator-404`: exit 64) unless `refusalIsUsage` is false (a scenario's step, which `simulator run --dir` reports
    /// with exit 1 too).
    func send(_ method: HTTPMethod, _ path: String, body: String? = nil, refusalIsUsage: Bool = true) async throws {
        var request = HTTPClientRequest(url: url + "/simulator/v1" + path)
        request.method = method
        request.headers.add(name: "Content-Type", value: "application/json")
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            throw CLIError(
                code: "timeout",
                message: "the simulator at \(url) did not answer within 30 s: it answers a control action after delivering "
                    + "the notifications it caused, so a notification receiver that accepts connections but does not answer "
                    + "holds it up to 10 s per notification"
            )
        } catch {
            throw CLIError(code: "unreachable", message: "no simulator answered at \(url): \(AppStoreServerAPIClient.describe(error))")
        }
        let text = String(buffer: try await response.body.collect(upTo: 16 << 20))
        guard (200..<300).contains(response.status.code) else {
            let answer = text.trimmingCharacters(in: .whitespacesAndNewlines)
            var error = CLIError(
                code: "simulator-\(response.status.code)",
                message: answer.isEmpty
                    ? "the simulator answered \(method.rawValue) \(UntrustedText.escaped(path, limit: 200)) with \(response.status.code) and no body"
                    : answer)
            if !refusalIsUsage { error.notUsage = true }
            throw error
        }
        print(text)
    }
}

func jsonBody(_ fields: [String: Any?]) -> String {
    let present = fields.compactMapValues { $0 }
    let data = (try? JSONSerialization.data(withJSONObject: present, options: [.sortedKeys])) ?? Data("{}".utf8)
    return String(decoding: data, as: UTF8.self)
}

struct SimulatorCustomer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "customer", abstract: "Create an Apple Account on a running simulator.")
    @OptionGroup var control: ControlOptions
    @Option var id: String
    @Option(help: "ISO 3166-1 alpha-3 storefront.") var storefront: String = "USA"

    func run() async throws {
        try await reportingFailures {
            try await control.send(.POST, "/customers", body: jsonBody(["id": id, "storefront": storefront]))
        }
    }
}

struct SimulatorBuy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "buy", abstract: "Buy a product; prints the signedTransaction a StoreKit 2 app would get."
    )
    @OptionGroup var control: ControlOptions
    @Option var customer: String
    @Option var product: String
    @Option var quantity: Int = 1
    @Option var offer: String?
    @Option(name: .customLong("app-account-token")) var appAccountToken: String?

    func validate() throws {
        // The simulator's rule, said before the call (a refused value is a usage mistake: exit 64).
        guard (1...10).contains(quantity) else {
            throw ValidationError("--quantity must be 1 to 10 (more than 1 for consumables only), not \(quantity)")
        }
        if let appAccountToken, LowercaseUUID(uuidString: appAccountToken) == nil {
            throw ValidationError("--app-account-token must be a UUID (8-4-4-4-12 hexadecimal digits)")
        }
    }

    func run() async throws {
        try await reportingFailures {
            try await control.send(
                .POST, "/purchases",
                body: jsonBody([
                    "customerId": customer, "productId": product, "quantity": quantity, "offerId": offer,
                    "appAccountToken": appAccountToken,
                ]))
        }
    }
}

struct SimulatorAdvance: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "advance", abstract: "Move a running simulator's clock forward.")
    @OptionGroup var control: ControlOptions
    @Option var days: Double?
    @Option var seconds: Double?

    func validate() throws {
        guard days != nil || seconds != nil else { throw ValidationError("give --days or --seconds (how far to move the clock)") }
        for (name, value, unit) in [("--days", days, 86_400.0), ("--seconds", seconds, 1)] {
            if let value, !(value.isFinite && value > 0) {
                throw ValidationError("\(name) must be a positive number (the clock only moves forward), not \(value)")
            }
            if let value, value * unit > LifecycleEngine.longestAdvance {
                throw ValidationError("\(name) moves the clock at most 100 years (36525 days) at once, not \(value)")
            }
        }
        let total = (seconds ?? 0) + (days ?? 0) * 86_400
        guard total >= 0.001 else { throw ValidationError("--days and --seconds must move the clock at least a millisecond") }
        guard total <= LifecycleEngine.longestAdvance else {
            throw ValidationError("--days and --seconds move the clock at most 100 years (36525 days) at once")
        }
    }

    func run() async throws {
        try await reportingFailures {
            try await control.send(.POST, "/clock/advance", body: jsonBody(["days": days, "seconds": seconds]))
        }
    }
}

struct SimulatorControl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "control",
        abstract: "Call any control endpoint: storekeeper simulator control POST /customers/alice/billing '{\"works\":false}'."
    )
    @OptionGroup var control: ControlOptions
    @Argument(help: "GET, POST or PUT.") var method: String
    @Argument(help: "A path under /simulator/v1, e.g. /ground-truth.") var path: String
    @Argument(help: "A JSON body.") var body: String?

    func run() async throws {
        try await reportingFailures {
            try await control.send(HTTPMethod(rawValue: method.uppercased()), path, body: body)
        }
    }
}
