import AppStoreModels
import Foundation
import Hummingbird
import NIOCore
import StorekeeperCore
import Synchronization

/// The demo's webhook receiver, what a developer's backend does with Storekeeper's events: check each request's
/// Standard Webhooks signature, keep each event once (by `webhook-id`), and keep each customer's latest state.
final class DemoReceiver: Sendable {
    struct Received: Sendable {
        var requests = 0
        var refused = 0
        var events: [String: (type: String, customer: String, sequence: Int)] = [:]
        /// Each customer's state from their latest event (by sequence), as JSON.
        var states: [String: (sequence: Int, entitled: [String])] = [:]
        var outOfOrder = 0
    }

    let secret: WebhookSecret
    let received = Mutex(Received())

    init(secret: WebhookSecret) {
        self.secret = secret
    }

    var summary: Received { received.withLock { $0 } }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.post("/events") { request, _ -> HTTPResponse.Status in
            let body = try await request.body.collect(upTo: 1 << 20)
            let bytes = Array(body.readableBytesView)
            func header(_ name: String) -> String { request.headers.first { $0.name.canonicalName == name }?.value ?? "" }
            let id = header("webhook-id")
            let timestamp = Int64(header("webhook-timestamp")) ?? 0
            let signature = header("webhook-signature")
            guard WebhookSignature.verify(id: id, timestamp: timestamp, body: bytes, signatureHeader: signature, secret: self.secret) else {
                self.received.withLock {
                    $0.requests += 1
                    $0.refused += 1
                }
                return .badRequest
            }
            struct Event: Decodable {
                var type: String
                var data: Data
                struct Data: Decodable {
                    var customerId: String
                    var sequence: Int
                    var state: State
                }
                struct State: Decodable {
                    var entitlements: [Item]
                    struct Item: Decodable { var productId: String }
                }
            }
            let event = try JSONDecoder().decode(Event.self, from: Data(bytes))
            self.received.withLock { received in
                received.requests += 1
                guard received.events[id] == nil else { return }
                received.events[id] = (event.type, event.data.customerId, event.data.sequence)
                let previous = received.states[event.data.customerId]?.sequence ?? 0
                if event.data.sequence != previous + 1 { received.outOfOrder += 1 }
                if event.data.sequence > previous {
                    received.states[event.data.customerId] = (
                        event.data.sequence, Set(event.data.state.entitlements.map(\.productId)).sorted()
                    )
                }
            }
            return .noContent
        }
        return router
    }
}
