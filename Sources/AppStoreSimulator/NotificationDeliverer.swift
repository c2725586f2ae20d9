public import AsyncHTTPClient
import AppStoreModels
import Foundation
public import Logging
public import NIOCore
import NIOHTTP1
public import ServiceLifecycle

/// Delivers notifications as the App Store does: POST `{"signedPayload": …}` to the configured URL; HTTP 200-206
/// is success, anything else (or no answer) a failure that production retries on Apple's schedule, measured on the
/// simulator's clock. Every attempt is recorded for Get Notification History. Faults (drop, duplicate, reorder,
/// delay) apply here.
public actor NotificationDeliverer: Service {
    let simulator: Simulator
    let client: HTTPClient
    let logger: Logger
    /// How long to wait for the receiver; Apple publishes no figure, and its engineers call 30 s too long.
    let timeout: TimeAmount
    private var delivering = false

    /// The client deliverers use unless given another: a refused connection fails the attempt at once (a pooled
    /// client's default is to keep trying until the attempt's timeout, which made every control action wait 10 s
    /// per notification while the receiver was down), and connecting may take at most 2 s. Lives as long as the
    /// process, like `HTTPClient.shared`.
    public static let sharedClient: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout.connect = .seconds(2)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    public init(simulator: Simulator, client: HTTPClient = NotificationDeliverer.sharedClient, logger: Logger, timeout: TimeAmount = .seconds(10)) {
        self.simulator = simulator
        self.client = client
        self.logger = logger
        self.timeout = timeout
    }

    /// Delivers every notification that is due now; returns how many attempts were made.
    @discardableResult
    public func deliverDue() async -> Int {
        guard !delivering else { return 0 }
        delivering = true
        defer { delivering = false }
        let (due, urlText, faults) = await simulator.deliverySnapshot()
        guard let urlText, !due.isEmpty else { return 0 }
        var batch = due
        if faults.reorderNotifications { batch.reverse() }
        var drop = faults.dropNextNotifications
        var duplicate = faults.duplicateNextNotifications
        for notification in batch {
            if faults.notificationDelayMilliseconds > 0 {
                try? await Task.sleep(for: .milliseconds(faults.notificationDelayMilliseconds))
            }
            let result: String
            if drop > 0 {
                drop -= 1
                result = "TIMED_OUT"
            } else {
                result = await post(notification.signedPayload, to: urlText)
                if duplicate > 0 {
                    duplicate -= 1
                    _ = await post(notification.signedPayload, to: urlText)
                }
            }
            logger.info(
                "notification delivery",
                metadata: [
                    "notification.uuid": .string(notification.notificationUUID),
                    "notification.type": .string(notification.notificationType.rawValue),
                    "result": .string(result),
                ]
            )
            await simulator.recordDelivery(notification.notificationUUID, result: result)
        }
        await simulator.useNotificationFaults(
            dropped: faults.dropNextNotifications - drop, duplicated: faults.duplicateNextNotifications - duplicate
        )
        return batch.count
    }

    /// Delivers due notifications every `interval` until the task is cancelled.
    public func run(every interval: Duration) async {
        while !Task.isCancelled {
            await deliverDue()
            try? await Task.sleep(for: interval)
        }
    }

    /// As a service: delivers due notifications five times a second until graceful shutdown.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await self.run(every: .milliseconds(200))
        }
    }

    /// One POST; the `sendAttemptResult` it earns.
    private func post(_ signedPayload: String, to url: String) async -> String {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "App Store Simulator (Storekeeper)")
        let body = #"{"signedPayload":"\#(signedPayload)"}"#
        request.body = .bytes(ByteBuffer(string: body))
        do {
            let response = try await client.execute(request, timeout: timeout)
            _ = try? await response.body.collect(upTo: 1 << 16)
            return (200...206).contains(response.status.code) ? "SUCCESS" : "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            return "TIMED_OUT"
        } catch let error as HTTPClientError where error == .remoteConnectionClosed {
            return "PREMATURE_CLOSE"
        } catch {
            return "NO_RESPONSE"
        }
    }
}

extension Simulator {
    /// What the deliverer needs: due notifications, the URL, the faults.
    func deliverySnapshot() -> ([NotificationRecord], String?, FaultConfiguration) {
        (engine.dueNotifications(), engine.state.notificationURL, engine.state.faults)
    }

    func recordDelivery(_ uuid: String, result: String) {
        _ = try? perform { (engine) throws(SimulatorError) in
            try engine.recordDeliveryAttempt(notificationUUID: uuid, result: result)
        }
    }

    func useNotificationFaults(dropped: Int, duplicated: Int) {
        guard dropped > 0 || duplicated > 0 else { return }
        _ = try? perform { engine in
            engine.state.faults.dropNextNotifications = max(0, engine.state.faults.dropNextNotifications - dropped)
            engine.state.faults.duplicateNextNotifications = max(0, engine.state.faults.duplicateNextNotifications - duplicated)
        }
    }
}
