package import AppStoreModels
package import AppStoreSigning
package import AsyncHTTPClient
package import Foundation
package import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// A client for the App Store Server API (APPSTORE-SPEC §1.3 rows 1-18) that survives Apple's rate limits and
/// outages: it retries what Apple says to retry (with exponential backoff and jitter, honouring `Retry-After`,
/// within a deadline), spaces requests under Apple's per-endpoint limits, pages with `AsyncSequence`s, and checks
/// requests before sending them. It works against Apple's production and sandbox and any base URL (the simulator).
package final class AppStoreServerAPIClient: Sendable {
    /// Where the API is.
    package enum Endpoint: Sendable, Hashable {
        /// `https://api.storekit.apple.com`.
        case production
        /// `https://api.storekit-sandbox.apple.com`.
        case sandbox
        /// Any base URL (e.g. the simulator's `http://127.0.0.1:8090`), with the environment it serves.
        case custom(baseURL: String, environment: AppStoreEnvironment)

        package var baseURL: String {
            switch self {
            case .production: return "https://api.storekit.apple.com"
            case .sandbox: return "https://api.storekit-sandbox.apple.com"
            case .custom(let url, _): return url.hasSuffix("/") ? String(url.dropLast()) : url
            }
        }

        package var environment: AppStoreEnvironment {
            switch self {
            case .production: return .production
            case .sandbox: return .sandbox
            case .custom(_, let environment): return environment
            }
        }
    }

    /// How requests are spaced.
    package enum RateLimiting: Sendable, Hashable {
        /// Apple's limits for the endpoint's environment (sandbox 10 %), less 10 % headroom for network jitter.
        case apple
        /// A share of Apple's limits (0 to 1): bulk jobs that must keep close to the limit use 0.95.
        case appleShare(Double)
        /// No client-side limiting.
        case disabled
        /// Custom requests per second per family.
        case custom([RequestRateLimiter.Family: Double])
    }

    /// Everything a client needs.
    package struct Configuration: Sendable {
        package var key: AppStoreAPIKey
        package var endpoint: Endpoint
        package var retry: RetryPolicy = .default
        package var rateLimiting: RateLimiting = .apple
        /// How long each auth token lives (at most 60 minutes); it is reused until a minute before it expires.
        package var tokenLifetime: TimeInterval = 20 * 60
        /// How far in the past tokens are issued (`iat`): Apple refuses a token whose `iat` is ahead of its clock, and
        /// two clocks are never exactly together. Default 60 s; the token's `exp` comes that much earlier too.
        package var clockSkewAllowance: TimeInterval = 60

        package init(key: AppStoreAPIKey, endpoint: Endpoint) {
            self.key = key
            self.endpoint = endpoint
        }
    }

    package let configuration: Configuration
    let httpClient: HTTPClient
    let logger: Logger
    let limiter: RequestRateLimiter?
    private let token = Mutex<(value: String, expires: Date)?>(nil)

    /// - Parameters:
    ///   - httpClient: defaults to the shared client; the caller owns any other.
    ///   - logger: requests at debug, retries at notice; never tokens or keys.
    package init(configuration: Configuration, httpClient: HTTPClient = .shared, logger: Logger = Logger(label: "AppStoreServerAPI")) {
        self.configuration = configuration
        self.httpClient = httpClient
        self.logger = logger
        switch configuration.rateLimiting {
        case .apple: limiter = RequestRateLimiter(sandbox: configuration.endpoint.environment != .production, scale: 0.9)
        case .appleShare(let share):
            limiter = RequestRateLimiter(sandbox: configuration.endpoint.environment != .production, scale: min(1, max(0.01, share)))
        case .disabled: limiter = nil
        case .custom(let rates): limiter = RequestRateLimiter(rates: rates)
        }
    }

    // MARK: - Auth

    /// The current token, made anew when it is within a minute of expiring.
    func authToken() throws(AppStoreServerAPIError) -> String {
        let now = Date()
        if let current = token.withLock({ $0 }), current.expires.timeIntervalSince(now) > 60 { return current.value }
        let lifetime = min(max(configuration.tokenLifetime, 120), APIAuthToken.maximumLifetime)
        let issued = now.addingTimeInterval(-configuration.clockSkewAllowance)
        let value: String
        do {
            value = try APIAuthToken.make(key: configuration.key, issuedAt: issued, lifetime: lifetime)
        } catch {
            throw AppStoreServerAPIError(kind: .configuration, message: "cannot make an auth token: \(error)")
        }
        token.withLock { $0 = (value, issued.addingTimeInterval(lifetime)) }
        return value
    }

    // MARK: - Sending

    /// One API call with retries: `Response` decoded from a 2xx body (``Empty`` for none).
    /// Calls `endpoint` with its path's `parameters` (each a valid path segment), paced by its rate-limit family.
    func send<Response: Decodable & Sendable>(
        _ endpoint: AppStoreEndpoint,
        _ parameters: [String] = [],
        query: [(String, String)] = [],
        body: (some Encodable & Sendable)? = Optional<Empty>.none,
        as type: Response.Type
    ) async throws(AppStoreServerAPIError) -> Response {
        try await send(
            HTTPMethod(rawValue: endpoint.method.rawValue), endpoint.path(parameters), query: query, body: body, family: endpoint.family, as: type
        )
    }

    func send<Response: Decodable & Sendable>(
        _ method: HTTPMethod,
        _ path: String,
        query: [(String, String)] = [],
        body: (some Encodable & Sendable)? = Optional<Empty>.none,
        family: RequestRateLimiter.Family,
        as type: Response.Type
    ) async throws(AppStoreServerAPIError) -> Response {
        let policy = configuration.retry
        let clock = ContinuousClock()
        let deadline = clock.now + policy.deadline
        var bodyBytes: Data? = nil
        if let body {
            do {
                bodyBytes = try AppStoreJSON.makeEncoder().encode(body)
            } catch {
                throw AppStoreServerAPIError(kind: .invalidRequest, message: "request body does not encode: \(error)")
            }
        }
        let url = configuration.endpoint.baseURL + path + Self.encode(query)
        var attempt = 0
        while true {
            attempt += 1
            var failure: AppStoreServerAPIError
            do {
                try await limiter?.acquire(family)
            } catch {
                throw AppStoreServerAPIError(kind: .transport, message: "cancelled", attempts: attempt)
            }
            do {
                return try await attemptOnce(
                    method, url, path: path, body: bodyBytes, timeout: min(policy.attemptTimeout, deadline - clock.now), as: type)
            } catch {
                failure = error
                failure.attempts = attempt
            }
            guard failure.isRetryable, attempt < policy.maximumAttempts else { throw failure }
            var wait = policy.backoff(retry: attempt)
            if let after = failure.retryAfter {
                let seconds = max(0, after.timeIntervalSinceNow)
                wait = .milliseconds(Int64(seconds * 1000))
            }
            guard clock.now + wait < deadline else {
                failure.message += "; giving up: the next retry would pass the \(policy.deadline) deadline"
                throw failure
            }
            logger.notice(
                "App Store Server API call will be retried",
                metadata: [
                    "api.path": .string(path), "api.attempt": .stringConvertible(attempt),
                    "api.error": .string(failure.errorCode.map(String.init) ?? failure.kind.rawValue),
                    "api.wait_ms": .stringConvertible(Int(wait / .milliseconds(1))),
                ]
            )
            do {
                try await Task.sleep(for: wait)
            } catch {
                throw AppStoreServerAPIError(kind: .transport, message: "cancelled while waiting to retry", attempts: attempt)
            }
        }
    }

    /// A body-less answer.
    package struct Empty: Codable, Sendable {}

    private func attemptOnce<Response: Decodable>(
        _ method: HTTPMethod,
        _ url: String,
        path: String,
        body: Data?,
        timeout: Duration,
        as type: Response.Type
    ) async throws(AppStoreServerAPIError) -> Response {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer " + (try authToken()))
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Storekeeper/1.0")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        logger.debug("App Store Server API request", metadata: ["api.method": .string(method.rawValue), "api.path": .string(path)])
        let status: Int
        let headers: HTTPHeaders
        let bytes: ByteBuffer
        do {
            let response = try await httpClient.execute(request, timeout: .milliseconds(Int64(timeout / .milliseconds(1))))
            status = Int(response.status.code)
            headers = response.headers
            bytes = try await response.body.collect(upTo: 32 << 20)
        } catch {
            throw AppStoreServerAPIError(
                kind: .transport, message: "no answer from \(configuration.endpoint.baseURL)\(path): \(Self.describe(error))",
                underlying: error
            )
        }
        let data = Data(bytes.readableBytesView)
        guard (200..<300).contains(status) else { throw Self.error(status: status, headers: headers, body: data, path: path) }
        if type == Empty.self { return Empty() as! Response }
        do {
            return try AppStoreJSON.makeDecoder().decode(type, from: data)
        } catch {
            throw AppStoreServerAPIError(
                kind: .malformedResponse, message: "\(path) answered \(status) with a body that is not \(type): \(error)",
                httpStatus: status
            )
        }
    }

    static func error(status: Int, headers: HTTPHeaders, body: Data, path: String) -> AppStoreServerAPIError {
        let retryAfter = headers.first(name: "Retry-After").flatMap { RetryPolicy.retryAfter($0) }
        let isJSON = headers.first(name: "Content-Type")?.lowercased().contains("application/json") ?? false
        let parsed = isJSON ? try? JSONDecoder().decode(ErrorResponse.self, from: body) : nil
        if status == 401 {
            return AppStoreServerAPIError(
                kind: .unauthorized,
                message: "the App Store refused the token (check the key ID, issuer ID, bundle ID and private key)",
                httpStatus: status
            )
        }
        let message = parsed?.errorMessage ?? "\(path) answered HTTP \(status)"
        return AppStoreServerAPIError(
            kind: .apiError, message: message, httpStatus: status, errorCode: parsed?.errorCode, retryAfter: retryAfter
        )
    }

    /// A transport failure in a few words: `timed out`, `connection refused`, the system's words for another socket
    /// error, else the error's own text, escaped and bounded. These errors carry addresses and reasons, never request
    /// headers. Shared by the App Store client, webhook deliveries and the `storekeeper simulator` commands.
    package static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .connectTimeout: return "timed out"
            case .remoteConnectionClosed: return "the connection was closed before the answer ended"
            default: break
            }
        }
        // NIO's own text of a socket error repeats itself ("connection reset (error set): Connection refused) (errno:
        // 111)"): the system's message is enough.
        if let error = error as? IOError, let message = strerror(error.errnoCode) {
            let text = String(cString: message)
            return text.prefix(1).lowercased() + text.dropFirst()
        }
        let text = String(describing: error)
        if text.contains("connectionRefused") || text.contains("Connection refused") { return "connection refused" }
        return UntrustedText.escaped(String(text.prefix(200)), limit: 200)
    }

    /// `?a=1&b=2`, percent-encoded; repeated names allowed.
    static func encode(_ query: [(String, String)]) -> String {
        guard !query.isEmpty else { return "" }
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+?/")
        return "?"
            + query.map { name, value in
                "\(name)=\(value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value)"
            }.joined(separator: "&")
    }

    /// A path segment, percent-encoded.
    static func segment(_ value: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}
