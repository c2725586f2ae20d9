import Foundation
import Testing

@testable import StorekeeperServer

@Suite("Storekeeper server: a configuration's mistakes in several parts")
struct ConfigurationPartsTests {
    @Test("mistakes in several parts (an app, the caches, jobs, an API key) are said at once, each located; one per part")
    func mistakesInSeveralParts() throws {
        let hash = String(repeating: "a", count: 64)
        let error = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                """
                {"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox", "Sandbx"]}],
                 "customerCache": {"capacity": -1, "maxAgeSeconds": 0},
                 "jobs": {"leaseSeconds": 1},
                 "apiKeys": [{"name": "desk", "sha256": "x", "scope": "admin"}]}
                """)
        }
        let message = error?.message ?? ""
        let parts = message.components(separatedBy: "; ")
        #expect(parts.count == 4, "\(message)")
        #expect(parts.first?.contains(":1:71: app 'com.example.app': environment 'Sandbx'") == true, "\(message)")
        #expect(parts.contains { $0.contains(":2:32: customerCache.capacity must be 0 (off) or more, not -1") }, "\(message)")
        // One per part: the cache's second mistake waits for the first to be fixed.
        #expect(!message.contains("customerCache.maxAgeSeconds"), "\(message)")
        #expect(parts.contains { $0.contains(":3:27: jobs.leaseSeconds must be 3 to 3600, not 1") }, "\(message)")
        #expect(parts.last?.contains("sha256 must be 64 hex digits") == true, "\(message)")
        #expect(error?.setting == "apps[0].environments[1]", "the first mistake's setting")
        // A configuration with one mistake says it alone, as before.
        let one = #expect(throws: ConfigurationError.self) {
            try StrictConfigurationTests.load(
                #"{"apps": [\#(StrictConfigurationTests.app)], "apiKeys": [{"name": "desk", "sha256": "\#(hash)", "scope": "app"}]}"#)
        }
        #expect(one?.message.contains("; ") == false && one?.message.contains("an app key needs the bundleId") == true, "\(String(describing: one))")
    }
}
