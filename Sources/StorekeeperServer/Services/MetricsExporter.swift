import CoreMetrics
import Foundation
import Hummingbird
package import Prometheus
package import StorekeeperCore

/// The server's metrics (`StorekeeperMetrics`) collected in a swift-prometheus registry of its own (never the
/// global one) and written at `GET /metrics` in the Prometheus text format, with each metric's help text.
package final class MetricsExporter: Sendable {
    package let registry: PrometheusCollectorRegistry
    /// What the server's parts record into.
    package let metrics: StorekeeperMetrics

    /// Upper bounds of the request-latency buckets (the same as before swift-prometheus).
    static let requestBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .microseconds(2_500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2_500),
    ]

    package init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        self.metrics = StorekeeperMetrics(factory: DescribedFactory(registry: registry, help: StorekeeperMetrics.Name.help))
    }

    /// The exposition text.
    package func render() -> String { registry.emitToString() }

    /// swift-prometheus's factory, but every metric registered with its help text (swift-metrics has no place for one).
    struct DescribedFactory: MetricsFactory {
        let registry: PrometheusCollectorRegistry
        let help: [String: String]
        let plain: PrometheusMetricsFactory

        init(registry: PrometheusCollectorRegistry, help: [String: String]) {
            self.registry = registry
            self.help = help
            var plain = PrometheusMetricsFactory(registry: registry)
            plain.durationHistogramBuckets[StorekeeperMetrics.Name.requestDuration] = MetricsExporter.requestBuckets
            self.plain = plain
        }

        private func descriptor(_ label: String) -> MetricNameDescriptor {
            MetricNameDescriptor(metricName: label, unitName: "", helpText: help[label] ?? "")
        }

        func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
            registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
        }

        func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
            registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
        }

        func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
            aggregate
                ? plain.makeRecorder(label: label, dimensions: dimensions, aggregate: true)
                : registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
        }

        func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
            registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
        }

        func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
            let buckets = plain.durationHistogramBuckets[label] ?? plain.defaultDurationHistogramBuckets
            return registry.makeDurationHistogram(descriptor: descriptor(label), labels: dimensions, buckets: buckets)
        }

        func destroyCounter(_ handler: any CounterHandler) { plain.destroyCounter(handler) }
        func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) { plain.destroyFloatingPointCounter(handler) }
        func destroyRecorder(_ handler: any RecorderHandler) { plain.destroyRecorder(handler) }
        func destroyMeter(_ handler: any MeterHandler) { plain.destroyMeter(handler) }
        func destroyTimer(_ handler: any TimerHandler) { plain.destroyTimer(handler) }
    }
}

/// Times every request into ``StorekeeperMetrics``, labelled by the matched route pattern (never by an ID).
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: StorekeeperMetrics

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
        metrics.request(
            route: context.endpointPath ?? "unmatched", method: request.method.rawValue, status: status, duration: ContinuousClock.now - start)
    }
}
