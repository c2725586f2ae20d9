import AppStoreModels
import ArgumentParser
import Foundation
import Logging
import StorekeeperCore
import StorekeeperServer

struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Read the ledger's events and manage their webhook deliveries.",
        discussion: """
            Events are what `GET /v1/events` lists and webhooks carry: one per change of a customer's entitlements or \
            purchases, with the customer's whole new state. These commands read or change the ledger directly, beside \
            a running server or not.
            """,
        subcommands: [
            EventsList.self, EventsShow.self, EventsRedeliver.self, EventsReplay.self, EventsStatus.self, EventsResume.self, EventsSecret.self,
        ]
    )
}

/// The ledger option of every events command.
struct EventsLedgerOptions: ParsableArguments {
    @Option(help: ArgumentHelp(stringLiteral: "The ledger (it must exist): " + LedgerDatabase.help)) var database: String = "storekeeper.sqlite"

    /// `readOnly`: the command only reads (a SQLite ledger is opened read-only: nothing in it or its log changes).
    func withStore<T: Sendable>(readOnly: Bool = false, _ body: @escaping @Sendable (any LedgerStore) async throws -> T) async throws -> T {
        var logger = Logger(label: "storekeeper")
        logger.logLevel = .warning
        return try await LedgerDatabase.withOpened(database, access: readOnly ? .reading : .existing, logger: logger) { ledger in
            try await body(ledger.store)
        }
    }
}

/// The endpoint an events command acts on, from the configuration.
struct EventsEndpointOptions: ParsableArguments {
    @Option(help: "The configuration file (JSON): it names the webhook endpoints.") var config: String
    @Option(help: "The webhook endpoint's name (webhooks[].name).") var endpoint: String

    func load() throws -> ServerConfiguration.WebhookEndpoint {
        let configuration = try ServerConfiguration.load(path: config)
        guard let found = configuration.webhooks.first(where: { $0.name == endpoint }) else {
            let names = configuration.webhooks.map(\.name)
            throw CLIError(
                code: "unknown-endpoint",
                message: "no webhook endpoint \(UntrustedText.quoted(endpoint, limit: 64)) in \(config)"
                    + (names.isEmpty ? " (it has none)" : " (it has \(names.joined(separator: ", ")))"))
        }
        return found
    }
}

/// What narrows the events a command reads.
struct EventsFilterOptions: ParsableArguments {
    @Option(help: "Only events that happened at or after this ISO-8601 date.") var since: String?
    @Option(help: "Only this customer's events.") var customer: String?
    @Option(name: .customLong("bundle-id"), help: "Only this app's events.") var bundleId: String?
    @Option(help: "Only events of this type (subscription.renewed, …).") var type: String?

    func filter() throws -> EventFilter {
        if let customer, !isCustomerId(customer) {
            throw CLIError(
                code: "invalid-option",
                message: "--customer \(UntrustedText.quoted(customer, limit: 64)) is not a customer ID (1-128 ASCII letters, digits and -_.@:)")
        }
        var filter = EventFilter(customerId: customer, since: try since.map(parseDate))
        if let bundleId {
            // The configuration's rule for a bundle ID: a mistyped one would otherwise match nothing, silently.
            guard ServerConfiguration.isBundleId(bundleId) else {
                throw CLIError(
                    code: "invalid-option",
                    message: "--bundle-id \(UntrustedText.quoted(bundleId, limit: 64)) is not a bundle ID: letters, digits, '-' and '.' only")
            }
            filter.bundleIds = [bundleId]
        }
        if let type {
            do throws(EventType.UnknownName) {
                filter.types = [try EventType.named(type, field: "--type")]
            } catch {
                throw CLIError(code: "invalid-option", message: error.message)
            }
        }
        return filter
    }
}

struct EventsList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Print events, oldest first, one JSON object per line (as webhooks carry them).")
    @OptionGroup var ledger: EventsLedgerOptions
    @OptionGroup var narrowing: EventsFilterOptions
    @Option(help: "At most this many events.") var limit: Int = 100

    func run() async throws {
        try await reportingFailures {
            guard (1...100_000).contains(limit) else { throw CLIError(code: "invalid-option", message: "--limit must be 1 to 100000, not \(limit)") }
            let filter = try narrowing.filter()
            let limit = limit
            try await ledger.withStore(readOnly: true) { store in
                var position: Int64 = 0
                var printed = 0
                while printed < limit {
                    let page = try await store.events(after: position, limit: min(500, limit - printed), filter: filter)
                    guard let last = page.last else { break }
                    for event in page { print(event.jsonText) }
                    printed += page.count
                    position = last.position
                }
            }
        }
    }
}

struct EventsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Print one event and its deliveries, with every attempt.")
    @OptionGroup var ledger: EventsLedgerOptions
    @Argument(help: "The event's ID (evt_…).") var id: String

    func run() async throws {
        try await reportingFailures {
            guard let eventId = EventID(id) else {
                throw CLIError(
                    code: "invalid-argument", message: "\(UntrustedText.quoted(id, limit: 64)) is not an event ID (\(EventID.shape))")
            }
            let (event, deliveries) = try await ledger.withStore(readOnly: true) { store in
                guard let event = try await store.event(eventId) else {
                    throw CLIError(code: "unknown-event", message: "no event \(eventId) in the ledger (events are kept events.retentionDays)")
                }
                return (event, try await store.deliveries(of: event.position))
            }
            let eventValue = try JSONDecoder().decode(JSONValue.self, from: Data(event.jsonText.utf8))
            try JSONOutput.print(["event": eventValue, "deliveries": try JSONOutput.value(deliveries)])
        }
    }
}

struct EventsRedeliver: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "redeliver", abstract: "Deliver events again to an endpoint (dead-lettered ones, or any), from now.")
    @OptionGroup var ledger: EventsLedgerOptions
    @OptionGroup var target: EventsEndpointOptions
    @Argument(help: "The events' IDs (evt_…).") var ids: [String]

    func run() async throws {
        try await reportingFailures {
            let endpoint = try target.load()
            guard !ids.isEmpty else { throw CLIError(code: "invalid-argument", message: "give the IDs of the events to deliver again") }
            let eventIds = try ids.map { text in
                guard let id = EventID(text) else {
                    throw CLIError(
                        code: "invalid-argument", message: "\(UntrustedText.quoted(text, limit: 64)) is not an event ID (\(EventID.shape))")
                }
                return id
            }
            let count = try await ledger.withStore { store in
                var events: [LedgerEvent] = []
                for id in eventIds {
                    guard let event = try await store.event(id) else {
                        throw CLIError(code: "unknown-event", message: "no event \(id) in the ledger")
                    }
                    guard endpoint.route.matches(event) else {
                        // A usage mistake, as the admin route's 400 `invalid-parameter` says it.
                        throw CLIError(
                            code: "invalid-argument",
                            message: "endpoint '\(endpoint.name)' does not take event \(id) (its apps, environments or eventTypes leave it out)")
                    }
                    events.append(event)
                }
                try await store.enqueue(events, endpoint: endpoint.name, now: Date())
                return events.count
            }
            try JSONOutput.print(RedeliveryAnswer(endpoint: endpoint.name, redelivered: count, events: eventIds.map(\.description)))
        }
    }
}

struct EventsReplay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Deliver again, from now, every event since a date (and matching the options) to an endpoint.",
        discussion: "Receivers deduplicate by webhook-id: a replayed event they already have is a duplicate to them.")
    @OptionGroup var ledger: EventsLedgerOptions
    @OptionGroup var target: EventsEndpointOptions
    @OptionGroup var narrowing: EventsFilterOptions

    func run() async throws {
        try await reportingFailures {
            let endpoint = try target.load()
            guard narrowing.since != nil else { throw CLIError(code: "invalid-option", message: "give --since: the date from which to replay") }
            let apps = try ServerConfiguration.load(path: target.config).apps.map(\.bundleId)
            if let bundleId = narrowing.bundleId, !apps.contains(bundleId) {
                throw CLIError(
                    code: "unknown-app",
                    message:
                        "--bundle-id \(UntrustedText.quoted(bundleId, limit: 64)) is not an app of \(target.config) (it has \(apps.joined(separator: ", ")))"
                )
            }
            let filter = try narrowing.filter()
            let count = try await ledger.withStore { store in try await store.redeliver(endpoint.route, filter: filter, now: Date()) }
            try JSONOutput.print(RedeliveryAnswer(endpoint: endpoint.name, replayed: count))
        }
    }
}

struct EventsStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Print each configured endpoint's backlog, dead letters and failing mark.")
    @OptionGroup var ledger: EventsLedgerOptions
    @Option(help: "The configuration file (JSON).") var config: String

    func run() async throws {
        try await reportingFailures {
            let routes = try ServerConfiguration.load(path: config).webhooks.map(\.route)
            let statuses = try await ledger.withStore(readOnly: true) { store in
                var statuses: [EndpointStatus] = []
                for route in routes { statuses.append(try await store.endpointStatus(route)) }
                return statuses
            }
            try JSONOutput.print(statuses)
        }
    }
}

struct EventsResume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume", abstract: "Clear an endpoint's failing mark and make its waiting deliveries due now.")
    @OptionGroup var ledger: EventsLedgerOptions
    @OptionGroup var target: EventsEndpointOptions

    func run() async throws {
        try await reportingFailures {
            let endpoint = try target.load()
            try await ledger.withStore { store in try await store.resumeEndpoint(endpoint.name, now: Date()) }
            try JSONOutput.print(try await ledger.withStore { store in try await store.endpointStatus(endpoint.route) })
        }
    }
}

struct EventsSecret: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "secret", abstract: "Print a new webhook signing secret (whsec_ and 32 random bytes in base64).")

    func run() async throws {
        print(WebhookSecret.generate())
    }
}
