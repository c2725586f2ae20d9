import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: metrics")
struct MetricsTests {
    @Test("/metrics counts notifications by type and outcome, verification failures by code, and request latency by route")
    func exposition() async throws {
        var testbed = try ServerTestbed()
        try testbed.engine.createCustomer(id: "alice")
        _ = try testbed.engine.purchase(.init(customerId: "alice", productId: "pro.monthly"))
        let genuine = testbed.engine.state.notifications[0].signedPayload
        let forged = try TestCertificateAuthority.generate().makeSigner().sign(
            NotificationPayload(
                notificationType: .test, notificationUUID: UUID().uuidString,
                data: NotificationData(bundleId: "com.example.storekeeper", environment: .sandbox)
            ))
        try await testbed.withClient { client in
            for jws in [genuine, genuine, forged] {
                _ = try await client.send(.post, "/appstore/notifications", body: #"{"signedPayload":"\#(jws)"}"#)
            }
            _ = try await client.send(.post, "/appstore/notifications", body: "not json")
            _ = try await client.send(.get, "/v1/customers/alice", key: ServerTestbed.appKey)
            _ = try await client.send(.get, "/v1/customers/bob", key: ServerTestbed.appKey)
            let text = try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/plain; version=0.0.4") == true)
                return String(buffer: response.body)
            }
            let lines = Set(text.split(separator: "\n").map(String.init))
            #expect(lines.contains(#"storekeeper_notifications_total{type="SUBSCRIBED",outcome="applied"} 1"#), "\(text)")
            #expect(lines.contains(#"storekeeper_notifications_total{type="SUBSCRIBED",outcome="duplicate"} 1"#))
            #expect(lines.contains(#"storekeeper_notifications_total{type="unverified",outcome="rejected"} 2"#))
            #expect(lines.contains(#"storekeeper_verification_failures_total{code="untrusted-root"} 1"#))
            // Latency by route pattern, not by customer ID: reads of two unknown customers fall in one series.
            let route = #"route="/v1/customers/{customerId}",method="GET",status="404""#
            #expect(lines.contains("storekeeper_http_request_duration_seconds_count{\(route)} 2"))
            #expect(lines.contains("storekeeper_http_request_duration_seconds_bucket{\(route),le=\"+Inf\"} 2"))
            #expect(!text.contains("alice") && !text.contains("bob"))
            #expect(lines.contains(#"storekeeper_http_request_duration_seconds_count{route="/appstore/notifications",method="POST",status="200"} 2"#))
            #expect(!text.contains(ServerTestbed.appKey))
        }
    }

    @Test("label values are escaped; every metric has its help text")
    func escaping() {
        let exporter = MetricsExporter()
        exporter.metrics.notification(type: "A\"B\\C\nD", outcome: "applied")
        exporter.metrics.customerCache(hit: true)
        let text = exporter.render()
        #expect(text.contains(#"type="A\"B\\C\nD""#), "\(text)")
        #expect(text.contains("# HELP storekeeper_notifications_total App Store Server Notifications received, by type and outcome."))
        #expect(text.contains("# TYPE storekeeper_customer_cache_requests_total counter"))
    }
}
