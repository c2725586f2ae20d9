import Foundation
import Hummingbird
import Logging
import StorekeeperCore
import StorekeeperTesting
import Testing

@testable import StorekeeperServer

#if canImport(Glibc)
import Glibc
#endif

/// A TCP connection to a loopback port, byte by byte, as a slow or hostile client would use one. Reads poll without
/// blocking and sleep between polls, so that waiting never holds one of the few threads the server's handlers run on.
final class RawConnection: @unchecked Sendable {
    // Only ever used by one test task at a time.
    let socketDescriptor: Int32

    init(port: Int) throws {
        #if canImport(Glibc)
        socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        socketDescriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    deinit { close(socketDescriptor) }

    /// Sends text; false when the server has closed the connection.
    @discardableResult
    func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.send(socketDescriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// Everything received until the server closes the connection or `seconds` pass; and whether it closed.
    func receive(for seconds: Double) async -> (text: String, closed: Bool) {
        var received: [UInt8] = []
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var pollDescriptor = pollfd(fd: socketDescriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&pollDescriptor, 1, 0) > 0 else {
                try? await Task.sleep(for: .milliseconds(5))
                continue
            }
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let count = buffer.withUnsafeMutableBytes { recv(socketDescriptor, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return (String(decoding: received, as: UTF8.self), true) }
            received += buffer[0..<count]
        }
        return (String(decoding: received, as: UTF8.self), false)
    }

    /// Reads until `text` has arrived (or the connection closed, or `seconds` passed).
    func receive(until text: String, within seconds: Double) async -> String {
        var all = ""
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !all.contains(text) {
            let (part, closed) = await receive(for: min(0.05, max(0.001, deadline.timeIntervalSinceNow)))
            all += part
            if closed { break }
        }
        return all
    }
}

@Suite("Storekeeper server: connection limits")
struct ConnectionLimitTests {
    typealias T = ServerTestbed

    /// A live server with `limits` on a loopback port.
    static func withServer(_ limits: HTTPLimits, _ body: @escaping @Sendable (Int) async throws -> Void) async throws {
        let testbed = try T()
        var configuration = testbed.configuration
        configuration.http = limits
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let ports = AsyncStream<Int>.makeStream()
        let app = StorekeeperApplication.buildApplication(
            store: testbed.store, configuration: configuration, verifiers: try configuration.makeVerifiers(), port: 0, logger: logger,
            onServerRunning: { ports.continuation.yield($0) }
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.runService(gracefulShutdownSignals: []) }
            var iterator = ports.stream.makeAsyncIterator()
            let port = try #require(await iterator.next())
            try await body(port)
            group.cancelAll()
        }
    }

    static let health = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"

    @Test("a connection that sends nothing, or its head too slowly (slowloris), gets 408 and is closed")
    func slowHeaders() async throws {
        try await Self.withServer(HTTPLimits(idleTimeout: 30, headerReadTimeout: 0.5)) { port in
            let silent = try RawConnection(port: port)
            let started = Date()
            let (answer, closed) = await silent.receive(for: 30)
            #expect(closed && answer.hasPrefix("HTTP/1.1 408") && answer.contains("header-timeout"), "\(answer)")
            // Closed by the header deadline (0.5 s), not by the idle timeout (30 s), however loaded the machine.
            #expect(Date().timeIntervalSince(started) < 20)

            let slow = try RawConnection(port: port)
            slow.send("GET /health HTTP/1.1\r\nHost: localhost\r\n")
            var text = ""
            var closedSlow = false
            let slowDeadline = Date().addingTimeInterval(30)
            var index = 0
            while !closedSlow, Date() < slowDeadline {
                index += 1
                slow.send("X-Slow-\(index): a\r\n")
                let (part, closed) = await slow.receive(for: 0.1)
                text += part
                closedSlow = closed
            }
            #expect(closedSlow && text.hasPrefix("HTTP/1.1 408"), "a header line every 100 ms kept the connection: \(text)")
        }
    }

    @Test("an idle keep-alive connection is closed after the idle timeout; a busy one is not")
    func idleConnections() async throws {
        // Generous margins: a loaded machine must not turn a busy connection into an idle one.
        try await Self.withServer(HTTPLimits(idleTimeout: 2, headerReadTimeout: 10)) { port in
            let connection = try RawConnection(port: port)
            var started = Date()
            for round in 0..<3 {
                if round > 0 { try await Task.sleep(for: .milliseconds(100)) }
                connection.send(Self.health)
                #expect(await connection.receive(until: #""status":"ok""#, within: 30).contains("200 OK"))
                // The idle time counts from the last answer (a sleep after it may overrun on a loaded machine).
                started = Date()
            }
            let (rest, closed) = await connection.receive(for: 30)
            #expect(closed && rest.isEmpty, "\(rest)")
            #expect(Date().timeIntervalSince(started) > 1, "closed before the idle timeout")
        }
    }

    @Test("a chunked body that never ends gets 408 and the connection is closed; a malformed one gets 400, not 413")
    func slowAndMalformedBodies() async throws {
        try await Self.withServer(HTTPLimits(headerReadTimeout: 5, bodyReadTimeout: 0.5)) { port in
            let endless = try RawConnection(port: port)
            endless.send(
                "POST /appstore/notifications HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
            var text = ""
            var closed = false
            let endlessDeadline = Date().addingTimeInterval(30)
            while !closed, Date() < endlessDeadline {
                endless.send("1\r\n \r\n")
                let (part, isClosed) = await endless.receive(for: 0.1)
                text += part
                closed = isClosed
            }
            #expect(closed && text.hasPrefix("HTTP/1.1 408") && text.contains("body-timeout"), "\(text)")
            #expect(text.lowercased().contains("\r\nconnection: close\r\n"), "\(text)")

            let malformed = try RawConnection(port: port)
            malformed.send("POST /appstore/notifications HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n")
            let answer = await malformed.receive(until: "\r\n\r\n", within: 30)
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer)")
        }
    }

    @Test("a body declared over 1 MiB gets 413 at once on every route, those that read no body too, and the connection is closed")
    func declaredTooLarge() async throws {
        try await Self.withServer(HTTPLimits(headerReadTimeout: 5, bodyReadTimeout: 30)) { port in
            let requests = [
                "POST /appstore/notifications", "GET /health", "GET /metrics", "GET /v1/events", "POST /v1/admin/webhooks/orders/resume",
                "GET /v1/customers/alice", "DELETE /nowhere",
            ]
            for request in requests {
                let connection = try RawConnection(port: port)
                connection.send(
                    "\(request) HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer nobody\r\nContent-Length: 3000000\r\n"
                        + "Content-Type: application/json\r\n\r\n{\"signedPay")
                let started = Date()
                var (answer, closed) = ("", false)
                while !closed, Date().timeIntervalSince(started) < 25 {
                    let part = await connection.receive(for: 0.1)
                    answer += part.text
                    closed = part.closed
                }
                #expect(answer.hasPrefix("HTTP/1.1 413") && answer.contains(#""code":"body-too-large""#), "\(request): \(answer)")
                #expect(answer.lowercased().contains("\r\nconnection: close\r\n"), "\(request): \(answer)")
                // The body deadline is 30 s: an answer and a close before it did not wait for the body.
                #expect(closed, "\(request): the connection is still open")
                #expect(Date().timeIntervalSince(started) < 25, "\(request): waited for the body")
            }
            // A chunked body a route does not read: answered at once, and the answer says the connection closes.
            let chunked = try RawConnection(port: port)
            chunked.send(
                "GET /health HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n" + String(repeating: "x", count: 1000))
            var (chunkedAnswer, chunkedClosed) = ("", false)
            let chunkedStarted = Date()
            while !chunkedClosed, Date().timeIntervalSince(chunkedStarted) < 25 {
                let part = await chunked.receive(for: 0.1)
                chunkedAnswer += part.text
                chunkedClosed = part.closed
            }
            #expect(chunkedAnswer.hasPrefix("HTTP/1.1 200") && chunkedAnswer.lowercased().contains("\r\nconnection: close\r\n"), "\(chunkedAnswer)")
            #expect(chunkedClosed)
            // A length past Int64 (NIO takes any up to UInt64.max) is as large.
            let huge = try RawConnection(port: port)
            huge.send("GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 18446744073709551615\r\n\r\n")
            let hugeAnswer = await huge.receive(until: "\r\n\r\n", within: 25)
            #expect(hugeAnswer.hasPrefix("HTTP/1.1 413"), "\(hugeAnswer)")
            // The webhook's refusal is a refused notification, logged and counted as one.
            let metrics = try RawConnection(port: port)
            metrics.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            let exposition = await metrics.receive(for: 10).text
            let rejected = exposition.split(separator: "\n").filter {
                $0.hasPrefix("storekeeper_notifications_total{") && $0.contains("rejected") && $0.contains("unverified")
            }
            #expect(rejected.count == 1 && rejected.first?.hasSuffix(" 1") == true, "\(rejected)")
        }
    }

    @Test("pipelined requests sent at once are all answered on one connection")
    func pipelined() async throws {
        try await Self.withServer(HTTPLimits(idleTimeout: 5, headerReadTimeout: 5)) { port in
            let connection = try RawConnection(port: port)
            connection.send(Self.health + Self.health + Self.health)
            var text = ""
            let deadline = Date().addingTimeInterval(30)
            while text.components(separatedBy: #""status":"ok""#).count < 4, Date() < deadline {
                text += await connection.receive(for: 0.05).text
            }
            #expect(text.components(separatedBy: "HTTP/1.1 200 OK").count == 4, "\(text)")
        }
    }

    @Test("an HTTP/1.0 request is answered with Connection: close and its connection closes, unless it asks for keep-alive")
    func http10() async throws {
        try await Self.withServer(HTTPLimits(idleTimeout: 30, headerReadTimeout: 30)) { port in
            // Without keep-alive: closed after the answer (a client reading to the end used to wait out the idle timeout).
            let plain = try RawConnection(port: port)
            plain.send("GET /health HTTP/1.0\r\n\r\n")
            let (text, closed) = await plain.receive(for: 10)
            #expect(closed && text.contains(" 200 OK") && text.lowercased().contains("connection: close"), "\(text)")
            #expect(text.contains(#""status":"ok""#), "\(text)")
            // With keep-alive: two requests answered on one connection, which stays open.
            let kept = try RawConnection(port: port)
            let keepAlive = "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
            kept.send(keepAlive)
            let first = await kept.receive(until: #""status":"ok""#, within: 10)
            #expect(first.contains(" 200 OK") && first.lowercased().contains("connection: keep-alive"), "said, as HTTP/1.0 wants: \(first)")
            kept.send(keepAlive)
            let (second, secondClosed) = await kept.receive(for: 1)
            #expect(second.contains(" 200 OK") && !secondClosed, "\(second)")
            // HTTP/1.1 is as before: kept open.
            let modern = try RawConnection(port: port)
            modern.send(Self.health)
            let (answer, modernClosed) = await modern.receive(for: 1)
            #expect(answer.contains(" 200 OK") && !modernClosed, "\(answer)")
        }
    }

    @Test("HEAD on /health and /metrics answers the GET's status and headers without a body, and the connection goes on")
    func headProbes() async throws {
        try await Self.withServer(HTTPLimits(idleTimeout: 30, headerReadTimeout: 30)) { port in
            let connection = try RawConnection(port: port)
            connection.send("HEAD /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            connection.send("HEAD /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            connection.send(Self.health)
            let text = await connection.receive(until: #""status":"ok""#, within: 30)
            let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst()
            #expect(answers.count == 3, "\(text)")
            let heads = Array(answers.prefix(2))
            #expect(heads.allSatisfy { $0.hasPrefix("200 OK") && $0.hasSuffix("\r\n\r\n") }, "no body after a HEAD answer: \(text)")
            #expect(heads[0].lowercased().contains("content-type: application/json"), "\(heads[0])")
            #expect(heads[1].lowercased().contains("content-type: text/plain"), "\(heads[1])")
            #expect(answers.last?.hasPrefix("200 OK") == true && answers.last?.contains(#""status":"ok""#) == true, "\(text)")
            // The GET's Content-Length (RFC 9110), not 0.
            func length(_ head: String) -> Int? {
                head.lowercased().components(separatedBy: "\r\n").first { $0.hasPrefix("content-length:") }.flatMap {
                    Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
                }
            }
            let getBody = answers.last?.components(separatedBy: "\r\n\r\n").last ?? ""
            #expect(length(heads[0]) == getBody.utf8.count && getBody.utf8.count > 20, "\(text)")
            #expect((length(heads[1]) ?? 0) > 100, "\(heads[1])")
        }
    }

    @Test("at the connection cap a new connection waits, and is served as soon as another closes")
    func connectionCap() async throws {
        try await Self.withServer(HTTPLimits(idleTimeout: 30, headerReadTimeout: 30, maxConnections: 3)) { port in
            var held = try (0..<3).map { _ in try RawConnection(port: port) }
            for connection in held {
                connection.send(Self.health)
                #expect(await connection.receive(until: #""status":"ok""#, within: 30).contains("200 OK"))
            }
            let waiting = try RawConnection(port: port)
            waiting.send(Self.health)
            let (early, _) = await waiting.receive(for: 0.5)
            #expect(early.isEmpty, "served beyond the cap: \(early)")
            held.removeLast()
            #expect(await waiting.receive(until: #""status":"ok""#, within: 30).contains("200 OK"))
        }
    }
}

@Suite("Connection deadlines (state machine)")
struct ConnectionDeadlinesTests {
    @Test("the response deadline closes a connection whose client stops reading; a response in time disarms it")
    func responseDeadline() {
        var deadlines = ConnectionDeadlines()
        #expect(deadlines.connected() == .arm(.head))
        #expect(deadlines.headArrived() == .arm(.body))
        #expect(deadlines.requestEnded() == .arm(.response))
        #expect(deadlines.deadlinePassed(.response) == .close)

        var served = ConnectionDeadlines()
        _ = served.connected()
        _ = served.headArrived()
        _ = served.requestEnded()
        #expect(served.responseEnded() == .disarm)
        #expect(served.deadlinePassed(.response) == .none)
        #expect(served.bytesArrived() == .arm(.head))
    }

    @Test("an answer written before the body was read to its end closes the connection; a late body deadline asks for 408")
    func earlyAnswerAndSlowBody() {
        var early = ConnectionDeadlines()
        _ = early.connected()
        _ = early.headArrived()
        let saysClose = early.responseBegan()
        #expect(saysClose, "the answer says Connection: close")
        #expect(early.responseEnded() == .close)

        // The body ends while the answer is written: the answer said it would close, so it does.
        var racing = ConnectionDeadlines()
        _ = racing.connected()
        _ = racing.headArrived()
        let racingSaysClose = racing.responseBegan()
        #expect(racingSaysClose)
        _ = racing.requestEnded()
        #expect(racing.responseEnded() == .close)

        var inTurn = ConnectionDeadlines()
        _ = inTurn.connected()
        _ = inTurn.headArrived()
        _ = inTurn.requestEnded()
        let inTurnSaysClose = inTurn.responseBegan()
        #expect(!inTurnSaysClose, "a request read to its end keeps its connection")
        #expect(inTurn.responseEnded() == .disarm)

        var slow = ConnectionDeadlines()
        _ = slow.connected()
        _ = slow.headArrived()
        #expect(slow.deadlinePassed(.head) == .none)
        #expect(slow.deadlinePassed(.body) == .failSlowBody)
        #expect(slow.deadlinePassed(.response) == .close)
    }

    @Test("pipelined requests: the second head arriving before the first answer is no early answer")
    func pipelining() {
        var deadlines = ConnectionDeadlines()
        _ = deadlines.connected()
        _ = deadlines.headArrived()
        _ = deadlines.requestEnded()
        #expect(deadlines.bytesArrived() == .none)
        #expect(deadlines.headArrived() == .arm(.body))
        #expect(deadlines.requestEnded() == .arm(.response))
        #expect(deadlines.responseEnded() == .arm(.response))
        #expect(deadlines.responseEnded() == .disarm)
        #expect(deadlines.pending.isEmpty)
    }
}
