import AppStoreModels
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import ServiceLifecycle
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperServer
import StorekeeperTesting
import Synchronization
import Testing

@Suite("Storekeeper server: polling events")
struct EventsAPITests {
    typealias T = ServerTestbed

    /// alice (through a server-issued token) buys the monthly plan; dave buys the other app's unlock.
    static func twoAppsWithEvents() async throws -> T {
        var testbed = try T(catalog: T.twoApps)
        let token = try await testbed.store.appAccountToken(for: "alice", bundleId: "com.example.storekeeper", environment: .sandbox, renew: false)
        let other = try await testbed.store.appAccountToken(for: "dave", bundleId: "com.example.other", environment: .sandbox, renew: false)
        try testbed.engine.createCustomer(id: "apple-1")
        _ = try testbed.engine.purchase(.init(customerId: "apple-1", productId: "pro.monthly", appAccountToken: token))
        _ = try testbed.engine.purchase(.init(customerId: "apple-1", productId: "other.unlock", appAccountToken: other))
        return testbed
    }

    static func events(_ answer: Answer) -> [[String: Any]] { answer.json["events"] as? [[String: Any]] ?? [] }

    @Test("an app key lists its own app's events only, an admin key every app's; the cursor pages without loss or repeat; one event by ID")
    func listAndPage() async throws {
        let testbed = try await Self.twoAppsWithEvents()
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        try await testbed.withClient { client in
            for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
            let own = try await client.send(.get, "/v1/events", key: T.appKey)
            #expect(own.status == 200, "\(own.json)")
            let ownEvents = Self.events(own)
            #expect(ownEvents.count == 1)
            let first = try #require(ownEvents.first)
            #expect(first["type"] as? String == "subscription.started")
            let data = try #require(first["data"] as? [String: Any])
            #expect(
                data["customerId"] as? String == "alice" && data["bundleId"] as? String == "com.example.storekeeper" && data["sequence"] as? Int == 1)
            #expect((data["state"] as? [String: Any])?["customerId"] as? String == "alice", "the customer's whole state")
            #expect((data["cause"] as? [String: Any])?["kind"] as? String == "notification")
            // The state is what a read answers.
            let read = try await client.send(.get, "/v1/customers/alice", key: T.appKey)
            #expect(NSDictionary(dictionary: read.json) == NSDictionary(dictionary: try #require(data["state"] as? [String: Any])))
            let other = Self.events(try await client.send(.get, "/v1/events", key: T.otherAppKey))
            #expect(other.map { ($0["data"] as? [String: Any])?["customerId"] as? String } == ["dave"])
            let all = try await client.send(.get, "/v1/events?limit=1", key: T.adminKey)
            #expect(Self.events(all).count == 1 && all.json["hasMore"] as? Bool == true)
            let next = try #require(all.json["next"] as? String)
            let rest = try await client.send(.get, "/v1/events?after=\(next)", key: T.adminKey)
            #expect(Self.events(rest).count == 1 && rest.json["hasMore"] as? Bool == false)
            #expect(rest.json["next"] as? String != next)
            let none = try await client.send(.get, "/v1/events?after=\(try #require(rest.json["next"] as? String))", key: T.adminKey)
            #expect(Self.events(none).isEmpty && none.json["next"] as? String == rest.json["next"] as? String, "an empty page keeps the cursor")
            // One by ID: another app's event is unknown to an app key.
            let id = try #require(data["id"] as? String)
            #expect(try await client.send(.get, "/v1/events/\(id)", key: T.appKey).status == 200)
            #expect(try await client.send(.get, "/v1/events/\(id)", key: T.otherAppKey).errorCode == "unknown-event")
            // A customer filter, a type filter.
            #expect(Self.events(try await client.send(.get, "/v1/events?customer=dave", key: T.adminKey)).count == 1)
            #expect(Self.events(try await client.send(.get, "/v1/events?type=purchase.completed", key: T.adminKey)).count == 1)
            // Refused, by name.
            for (path, code) in [
                ("/v1/events?after=12", "invalid-cursor"), ("/v1/events?after=c1.02s", "invalid-cursor"),
                ("/v1/events?after=c1.%2B2s", "invalid-cursor"),
                ("/v1/events?after=c1.2S", "invalid-cursor"), ("/v1/events?limit=0", "invalid-parameter"),
                ("/v1/events?wait=61", "invalid-parameter"),
                ("/v1/events?type=subscription.renewd", "invalid-parameter"), ("/v1/events?afer=c1.1", "unknown-parameter"),
                ("/v1/events?customer=a%20b", "invalid-customer-id"), ("/v1/events/evt_nope", "invalid-parameter"),
                ("/v1/events?environment=Production", "unknown-environment"), ("/v1/events?li%6Dit=1", "unknown-parameter"),
            ] {
                let answer = try await client.send(.get, path, key: T.appKey)
                #expect(answer.status == 400 && answer.errorCode == code, "\(path): \(answer.json)")
            }
            // A parameter name written percent-encoded is named as such; empty pieces between separators are nothing.
            let encoded = try await client.send(.get, "/v1/events?li%6Dit=1", key: T.appKey)
            #expect(encoded.errorMessage.contains(#"write "limit""#), "\(encoded.json)")
            for path in ["/v1/events?&&limit=1", "/v1/events?limit=1&", "/v1/events?&"] {
                #expect(try await client.send(.get, path, key: T.appKey).status == 200, "\(path)")
            }
            // A mistyped type is named with the nearest; a name close to none lists them all.
            let mistyped = try await client.send(.get, "/v1/events?type=subscription.renewd", key: T.appKey)
            #expect(mistyped.errorMessage.contains(#"did you mean "subscription.renewed""#), "\(mistyped.json)")
            let unknown = try await client.send(.get, "/v1/events?type=zzz", key: T.appKey)
            #expect(unknown.status == 400 && unknown.errorMessage.contains("customer.erased, customer.transferred_in"), "\(unknown.json)")
            #expect(try await client.send(.get, "/v1/events").status == 401)
            let deleteEvents = try await client.send(.delete, "/v1/events", key: T.adminKey)
            #expect(deleteEvents.status == 405 && deleteEvents.allow == "GET")
            #expect(try await client.send(.post, "/v1/admin/webhooks", key: T.adminKey).allow == "GET")
            #expect(try await client.send(.put, "/v1/customers/alice", key: T.adminKey).allow == "GET, DELETE")
            #expect(try await client.send(.get, "/v1/admin/webhooks", key: T.appKey).errorCode == "admin-only")
            #expect(try await client.send(.get, "/v1/admin/webhooks", key: T.adminKey).status == 200)
        }
    }

    @Test(
        "cursors are opaque: encrypted under the ledger's own key, the same from every server of the ledger, refused by another ledger or when altered"
    )
    func opaqueCursors() async throws {
        let testbed = try await Self.twoAppsWithEvents()
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        let given = Mutex<[String]>([])
        try await testbed.withClient { client in
            for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
            for (key, path) in [(T.appKey, "/v1/events"), (T.otherAppKey, "/v1/events"), (T.adminKey, "/v1/events?limit=1")] {
                let next = try #require(try await client.send(.get, path, key: key).json["next"] as? String)
                given.withLock { $0.append(next) }
            }
        }
        let cursors = given.withLock { $0 }
        try #require(cursors.count == 3)
        let (own, other, all) = (cursors[0], cursors[1], cursors[2])
        let shape = /c2\.[A-Za-z0-9_-]{22}/
        for cursor in [own, other, all] { #expect(cursor.wholeMatch(of: shape) != nil, "\(cursor)") }
        // alice's event is the first in the outbox, as the admin's first page says: the same position, the same cursor.
        #expect(own == all && own != other)
        // Another server of the same ledger (a new router: it reads the key from the ledger) takes them and gives the same.
        try await testbed.withClient { client in
            let again = try await client.send(.get, "/v1/events?after=\(own)", key: T.appKey)
            #expect(again.status == 200 && Self.events(again).isEmpty && again.json["next"] as? String == own, "\(again.json)")
            let rest = try await client.send(.get, "/v1/events?after=\(all)", key: T.adminKey)
            #expect(Self.events(rest).map { ($0["data"] as? [String: Any])?["customerId"] as? String } == ["dave"])
            #expect(rest.json["next"] as? String == other)
            // Altered (one character, or the position written in the clear as earlier versions did): refused.
            var altered = Array(own)
            altered[5] = altered[5] == "A" ? "B" : "A"
            for cursor in [String(altered), "c1.1", "c1.2", "c2.AAAAAAAAAAAAAAAAAAAAAA", own + "A", String(own.dropLast())] {
                let answer = try await client.send(.get, "/v1/events?after=\(cursor)", key: T.appKey)
                #expect(answer.status == 400 && answer.errorCode == "invalid-cursor", "\(cursor): \(answer.json)")
                // An earlier version's cursor is named as one, with what to do.
                #expect(answer.errorMessage.contains("earlier version") == cursor.hasPrefix("c1."), "\(cursor): \(answer.json)")
            }
        }
        // A cursor made with the ledger's own key but past its last event (a ledger restored from an older backup): refused,
        // so that its consumer does not wait forever; one at the last event is taken.
        let cipher = EventCursor(secret: try await testbed.store.ledgerSecret(EventCursor.secretName, orNew: []))
        let last = try await testbed.store.lastEventPosition()
        #expect(cipher.position(of: own) == 1 && cipher.cursor(1) == own && cipher.position(of: cipher.cursor(0)) == 0)
        try await testbed.withClient { client in
            let ahead = try await client.send(.get, "/v1/events?after=\(cipher.cursor(last + 5))", key: T.appKey)
            #expect(ahead.status == 400 && ahead.errorCode == "invalid-cursor" && ahead.errorMessage.contains("past the last event"), "\(ahead.json)")
            let atLast = try await client.send(.get, "/v1/events?after=\(cipher.cursor(last))", key: T.adminKey)
            #expect(atLast.status == 200 && Self.events(atLast).isEmpty, "\(atLast.json)")
        }
        // Another ledger has another key: the cursor means nothing there.
        let elsewhere = try await Self.twoAppsWithEvents()
        try await elsewhere.withClient { client in
            let answer = try await client.send(.get, "/v1/events?after=\(own)", key: T.appKey)
            #expect(answer.status == 400 && answer.errorCode == "invalid-cursor", "\(answer.json)")
        }
    }

    @Test("a long poll answers as soon as an event is committed, and an empty page when the wait ends")
    func longPoll() async throws {
        let testbed = try await Self.twoAppsWithEvents()
        let jws = try #require(testbed.engine.state.notifications.first).signedPayload
        try await testbed.withClient { client in
            let started = ContinuousClock.now
            let empty = try await client.send(.get, "/v1/events?wait=1", key: T.appKey)
            #expect(Self.events(empty).isEmpty && ContinuousClock.now - started >= .milliseconds(900))
            async let polled = client.send(.get, "/v1/events?wait=20", key: T.appKey)
            try await Task.sleep(for: .milliseconds(300))
            let sent = ContinuousClock.now
            #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200)
            let answer = try await polled
            #expect(Self.events(answer).count == 1)
            #expect(ContinuousClock.now - sent < .seconds(12), "answered when the event was committed, not at the end of the 20 s wait")
        }
    }

    @Test("long polls are bounded: a key holds an eighth of http.maxConnections waiting, all keys a quarter; then 429 with Retry-After")
    func longPollsBounded() async throws {
        let testbed = try await Self.twoAppsWithEvents()
        var configuration = testbed.configuration
        configuration.http.maxConnections = 16  // 2 waits a key, 4 in all
        try await testbed.withClient(configuration: configuration) { client in
            // Nothing to read yet: every wait waits. The app key's third is refused at once; the other app's key has its own.
            // The first two have 2 s to reach the server and take their slots (a busy machine runs the whole suite at once).
            async let first = client.send(.get, "/v1/events?wait=8", key: T.appKey)
            async let second = client.send(.get, "/v1/events?wait=8", key: T.appKey)
            try await Task.sleep(for: .seconds(2))
            let started = ContinuousClock.now
            let third = try await client.send(.get, "/v1/events?wait=8", key: T.appKey)
            // At once: well before the 8 s it would have waited (room for a busy machine).
            #expect(third.status == 429 && third.errorCode == "too-many-waits" && ContinuousClock.now - started < .seconds(4), "\(third.json)")
            // Without a wait, a poll is always answered; so is another key's wait.
            #expect(try await client.send(.get, "/v1/events", key: T.appKey).status == 200)
            async let other = client.send(.get, "/v1/events?wait=1", key: T.otherAppKey)
            let (firstStatus, secondStatus, otherStatus) = (try await first.status, try await second.status, try await other.status)
            #expect(firstStatus == 200 && secondStatus == 200 && otherStatus == 200)
            // The slots are given back: the key may wait again.
            #expect(try await client.send(.get, "/v1/events?wait=1", key: T.appKey).status == 200)
        }
    }

    @Test("the admin replay narrows by since, customer, type and bundleId, each checked; the count is what it queued")
    func adminReplay() async throws {
        let testbed = try await Self.twoAppsWithEvents()
        var configuration = testbed.configuration
        configuration.webhooks = [.init(name: "backend", url: "http://127.0.0.1:9/hooks", secret: WebhookSecret.generate())]
        // The endpoint is registered before the events (a new endpoint starts after what is already committed).
        _ = try await testbed.store.fanOut(configuration.webhooks[0].route, limit: 0, now: Date())
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        try await testbed.withClient(configuration: configuration) { client in
            for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
            func replayed(_ query: String) async throws -> Answer {
                try await client.send(.post, "/v1/admin/webhooks/backend/replay?since=2020-01-01" + query, key: T.adminKey)
            }
            let all = try await replayed("")
            #expect(all.status == 200 && all.json["replayed"] as? Int == 2, "\(all.json)")
            #expect(try await replayed("&bundleId=com.example.other").json["replayed"] as? Int == 1)
            #expect(try await replayed("&type=purchase.completed&bundleId=com.example.storekeeper").json["replayed"] as? Int == 0)
            #expect(try await replayed("&bundleId=com.nope").errorCode == "unknown-app")
            #expect(try await replayed("&bundleld=com.example.other").errorCode == "unknown-parameter")
            #expect(try await client.send(.post, "/v1/admin/webhooks/backend/replay?since=2020-01-01", key: T.appKey).errorCode == "admin-only")
            // Redelivering one event answers as the command does: a count (and the event).
            let event = try #require(try await testbed.store.events(after: 0, limit: 1, filter: EventFilter()).first)
            let redelivered = try await client.send(.post, "/v1/admin/webhooks/backend/redeliver?event=\(event.id)", key: T.adminKey)
            #expect(redelivered.status == 200 && redelivered.json["redelivered"] as? Int == 1, "\(redelivered.json)")
            #expect(redelivered.json["events"] as? [String] == [event.id.description])
            let missing = try await client.send(.post, "/v1/admin/webhooks/backend/redeliver", key: T.adminKey)
            #expect(missing.errorCode == "invalid-parameter" && missing.errorMessage.hasPrefix("event is required"), "\(missing.json)")
        }
    }

    @Test("DELETE /v1/customers/{id}: admin keys only; the customer is unknown afterwards; erasing again is 404")
    func erase() async throws {
        let testbed = try await Self.twoAppsWithEvents()
        let notifications = testbed.engine.state.notifications.map(\.signedPayload)
        try await testbed.withClient { client in
            for jws in notifications { #expect(try await client.send(.post, "/appstore/notifications", body: WebhookTests.body(jws)).status == 200) }
            #expect(try await client.send(.delete, "/v1/customers/alice", key: T.appKey).errorCode == "admin-only")
            #expect(try await client.send(.delete, "/v1/customers/alice", key: T.adminKey).errorCode == "bundle-id-required")
            let erased = try await client.send(.delete, "/v1/customers/alice?bundleId=com.example.storekeeper", key: T.adminKey)
            #expect(erased.status == 200 && erased.json["tokensRemoved"] as? Int == 1, "\(erased.json)")
            #expect(try await client.send(.get, "/v1/customers/alice", key: T.appKey).status == 404)
            let events = Self.events(try await client.send(.get, "/v1/events?customer=alice", key: T.appKey))
            #expect(events.map { $0["type"] as? String } == ["customer.erased"])
            #expect(try await client.send(.delete, "/v1/customers/alice?bundleId=com.example.storekeeper", key: T.adminKey).status == 404)
            // The other app's customer is untouched.
            #expect(try await client.send(.get, "/v1/customers/dave", key: T.otherAppKey).status == 200)
        }
    }

    @Test("a graceful shutdown answers waiting long polls at once instead of waiting for them")
    func longPollDuringShutdown() async throws {
        let testbed = try T()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let ports = AsyncStream<Int>.makeStream()
        let configuration = testbed.configuration
        let app = StorekeeperApplication.buildApplication(
            store: testbed.store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0, logger: logger,
            onServerRunning: { ports.continuation.yield($0) })
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            let connection = try RawConnection(port: port)
            connection.send("GET /v1/events?wait=50 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(T.appKey)\r\n\r\n")
            try await Task.sleep(for: .milliseconds(500))
            let started = ContinuousClock.now
            await group.triggerGracefulShutdown()
            #expect(await connection.receive(until: "\"next\"", within: 20).contains("200 OK"), "the poll is answered")
            let answered = ContinuousClock.now - started
            try await tasks.next()
            let stopped = ContinuousClock.now - started
            // Bounds far from the poll's 50 s, with room for a machine busy with every other suite.
            #expect(answered < .seconds(20), "the poll is answered at the shutdown, not after its 50 s: \(answered)")
            #expect(stopped < .seconds(40), "the server stopped without waiting for the poll's 50 s: \(stopped)")
        }
    }
}
