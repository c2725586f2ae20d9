import Foundation
import Hummingbird
import Synchronization

/// The server's counters and latency histograms, exposed at `GET /metrics` in the Prometheus text format (0.0.4):
/// - `storekeeper_notifications_total{type,outcome}`: every notification received, by verified type (or
///   `unverified` when it was refused before its signature was checked) and outcome (`applied`, `duplicate`,
///   `rejected`, `storage_failure`);
/// - `storekeeper_verification_failures_total{code}`: refused signed data by the verifier's error code;
/// - `storekeeper_http_request_duration_seconds{route,method,status}`: a histogram of request latency by route
///   pattern (never by customer ID, so the label set stays small);
/// - `storekeeper_customer_cache_requests_total{result}`: customer reads answered from the cache (`hit`) or the
///   ledger (`miss`).
public final class ServerMetrics: Sendable {
    /// Upper bounds of the latency buckets, in seconds.
    static let buckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]

    struct Histogram {
        var counts = [UInt64](repeating: 0, count: ServerMetrics.buckets.count)
        var sum = 0.0
        var count: UInt64 = 0
    }

    struct RequestKey: Hashable { var route: String; var method: String; var status: Int }
    struct NotificationKey: Hashable { var type: String; var outcome: String }

    struct State {
        var notifications: [NotificationKey: UInt64] = [:]
        var verificationFailures: [String: UInt64] = [:]
        var requests: [RequestKey: Histogram] = [:]
        var cacheHits: UInt64 = 0
        var cacheMisses: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    package func recordNotification(type: String, outcome: String) {
        state.withLock { $0.notifications[NotificationKey(type: type, outcome: outcome), default: 0] += 1 }
    }

    package func recordVerificationFailure(code: String) {
        state.withLock { $0.verificationFailures[code, default: 0] += 1 }
    }

    package func recordCustomerCache(hit: Bool) {
        state.withLock { state in
            if hit { state.cacheHits += 1 } else { state.cacheMisses += 1 }
        }
    }

    /// Customer reads answered from the cache and from the ledger so far.
    package var customerCacheCounts: (hits: Int, misses: Int) {
        state.withLock { (Int($0.cacheHits), Int($0.cacheMisses)) }
    }

    package func recordRequest(route: String, method: String, status: Int, seconds: Double) {
        let bucket = Self.buckets.firstIndex { seconds <= $0 }
        state.withLock { state in
            let key = RequestKey(route: route, method: method, status: status)
            var histogram = state.requests[key] ?? Histogram()
            if let bucket { histogram.counts[bucket] += 1 }
            histogram.sum += seconds
            histogram.count += 1
            state.requests[key] = histogram
        }
    }

    /// The exposition text.
    public func render() -> String {
        let snapshot = state.withLock { $0 }
        var text = ""
        text += "# HELP storekeeper_notifications_total App Store Server Notifications received, by type and outcome.\n"
        text += "# TYPE storekeeper_notifications_total counter\n"
        for (key, value) in snapshot.notifications.sorted(by: { ($0.key.type, $0.key.outcome) < ($1.key.type, $1.key.outcome) }) {
            text += "storekeeper_notifications_total{type=\(Self.label(key.type)),outcome=\(Self.label(key.outcome))} \(value)\n"
        }
        text += "# HELP storekeeper_verification_failures_total Signed data refused by the verifier, by error code.\n"
        text += "# TYPE storekeeper_verification_failures_total counter\n"
        for (code, value) in snapshot.verificationFailures.sorted(by: { $0.key < $1.key }) {
            text += "storekeeper_verification_failures_total{code=\(Self.label(code))} \(value)\n"
        }
        text += "# HELP storekeeper_customer_cache_requests_total Customer reads answered from the cache (hit) or the ledger (miss).\n"
        text += "# TYPE storekeeper_customer_cache_requests_total counter\n"
        text += "storekeeper_customer_cache_requests_total{result=\"hit\"} \(snapshot.cacheHits)\n"
        text += "storekeeper_customer_cache_requests_total{result=\"miss\"} \(snapshot.cacheMisses)\n"
        text += "# HELP storekeeper_http_request_duration_seconds Time from request to response, by route, method and status.\n"
        text += "# TYPE storekeeper_http_request_duration_seconds histogram\n"
        let requests = snapshot.requests.sorted { ($0.key.route, $0.key.method, $0.key.status) < ($1.key.route, $1.key.method, $1.key.status) }
        for (key, histogram) in requests {
            let labels = "route=\(Self.label(key.route)),method=\(Self.label(key.method)),status=\"\(key.status)\""
            var cumulative: UInt64 = 0
            for (index, bound) in Self.buckets.enumerated() {
                cumulative += histogram.counts[index]
                text += "storekeeper_http_request_duration_seconds_bucket{\(labels),le=\"\(bound)\"} \(cumulative)\n"
            }
            text += "storekeeper_http_request_duration_seconds_bucket{\(labels),le=\"+Inf\"} \(histogram.count)\n"
            text += "storekeeper_http_request_duration_seconds_sum{\(labels)} \(histogram.sum)\n"
            text += "storekeeper_http_request_duration_seconds_count{\(labels)} \(histogram.count)\n"
        }
        return text
    }

    /// A quoted label value with `\`, `"` and newlines escaped.
    static func label(_ value: String) -> String {
        var escaped = "\""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped + "\""
    }
}

/// Times every request into `ServerMetrics`, labelled by the matched route pattern.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        do {
            let response = try await next(request, context)
            record(request, context, status: response.status.code, since: start)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            record(request, context, status: status, since: start)
            throw error
        }
    }

    private func record(_ request: Request, _ context: Context, status: Int, since start: ContinuousClock.Instant) {
        metrics.recordRequest(
            route: context.endpointPath ?? "unmatched", method: request.method.rawValue, status: status,
            seconds: (ContinuousClock.now - start) / .seconds(1)
        )
    }
}
