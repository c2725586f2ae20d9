import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import StorekeeperTesting
import Testing

@Suite("storekeeper simulator: crash")
struct SimulatorCrashTests {
    /// POSTs a control request; its status and body.
    static func post(_ url: String, _ body: String) async throws -> (UInt, String) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return (response.status.code, String(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    /// The transaction IDs of the purchases answered 200.
    actor Acknowledged {
        var ids: [String] = []
        func add(_ id: String) { ids.append(id) }
    }

    @Test("SIGKILL while concurrent purchases are being answered: every acknowledged purchase is there after a restart")
    func acknowledgedPurchasesSurviveSIGKILL() async throws {
        let directory = try CLI.temporaryDirectory("sim-crash").appendingPathComponent("sim")
        defer { try? FileManager.default.removeItem(at: directory.deletingLastPathComponent()) }
        try SimulatorDirectory.initialize(at: directory)
        let (process, port) = try CLI.startReportingPort(["simulator", "--dir", directory.path, "--port", "0"])
        let base = "http://127.0.0.1:\(port)/simulator/v1"
        #expect(try await Self.post(base + "/customers", #"{"id":"alice"}"#).0 == 201)
        let acknowledged = Acknowledged()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    // Buy until the process dies; a purchase counts once its 200 arrived.
                    while let (status, body) = try? await Self.post(base + "/purchases", #"{"customerId":"alice","productId":"coins.100"}"#),
                        status == 200
                    {
                        let id = (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["transactionId"] as? String
                        await acknowledged.add(id ?? "?")
                    }
                }
            }
            group.addTask {
                while await acknowledged.ids.count < 150 { try? await Task.sleep(for: .milliseconds(5)) }
                process.kill()
            }
        }
        let ids = await acknowledged.ids
        #expect(ids.count >= 150 && !ids.contains("?"))
        let state = try SimulatorDirectory(directory).loadState()
        #expect(Set(ids).isSubset(of: Set(state.transactions.keys)))
        // Each purchase is whole: its transaction and its notification, nothing half-written.
        #expect(state.notifications.count == state.transactions.count)
        #expect(state.transactions.keys.compactMap { Int64($0) }.max() == 2_000_000_000_000_000 + Int64(state.transactions.count))
    }
}
