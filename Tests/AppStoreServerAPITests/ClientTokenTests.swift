import AppStoreSigning
import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreServerAPI

@Suite("API client: auth tokens and clocks")
struct ClientTokenTests {
    typealias L = LiveSimulator

    /// `iat` of a token, read back.
    static func issuedAt(_ token: String) throws -> Int64 {
        let claims = try #require(token.split(separator: ".").dropFirst().first)
        let object = try JSONSerialization.jsonObject(with: Data(try Base64URL.decode(claims.utf8))) as? [String: Any]
        return try #require((object?["iat"] as? NSNumber)?.int64Value)
    }

    @Test(
        "tokens are issued a minute in the past, so a server clock a little ahead of Apple's is not refused; a simulator as strict as Apple refuses a token issued ahead of its clock"
    )
    func clockSkew() async throws {
        let live = try L(setUp: SimulatorFixture.aliceSubscribes)
        try await live.serve { url in
            let client = live.client(url)
            let token = try client.authToken()
            #expect(try Self.issuedAt(token) <= Int64(Date().timeIntervalSince1970) - 59)
            _ = try await client.transactionInfo("2000000000000001")

            // A server whose clock runs 30 s ahead of the App Store's, without the allowance: refused, 401.
            var ahead = client.configuration
            ahead.clockSkewAllowance = -30
            let error = await #expect(throws: AppStoreServerAPIError.self) {
                try await AppStoreServerAPIClient(configuration: ahead).transactionInfo("2000000000000001")
            }
            #expect(error?.httpStatus == 401)
        }
    }
}
