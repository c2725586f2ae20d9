import AppStoreModels
package import AppStoreServerAPI
package import Foundation

/// Whether the App Store accepts an app's App Store Server API credentials in one environment, found with one cheap
/// authenticated call (Get Notification History for the last hour; it changes nothing). A key, key ID, issuer ID or
/// bundle ID that is wrong but well formed loads fine and is refused only by the App Store (401): this finds it at
/// start instead of at the first recovery run, or never when recovery is off.
package struct CredentialCheck: Sendable {
    /// What the App Store said.
    package enum Outcome: String, Sendable, Codable {
        /// It answered past authentication (any answer but 401: the credentials work).
        case accepted
        /// 401: the key, key ID, issuer ID or bundle ID is wrong, or the key was revoked.
        case refused
        /// No answer (network, DNS, timeout) or a 5xx: not known.
        case unreachable
    }

    package struct Result: Sendable, Codable {
        package var bundleId: String
        package var environment: String
        package var outcome: Outcome
        /// In words, for the log and `storekeeper config check --online`.
        package var detail: String
    }

    /// Makes the call for `app` with `client` and says what came of it; never throws.
    package static func run(_ app: VerifierKey, client: AppStoreServerAPIClient, now: Date = Date()) async -> Result {
        var result = Result(bundleId: app.bundleId, environment: app.environment.rawValue, outcome: .accepted, detail: "")
        do {
            let pages = try client.notificationHistory(NotificationHistoryRequest(startDate: now.addingTimeInterval(-3_600), endDate: now))
            _ = try await pages.page(after: nil)
            result.detail = "the App Store accepted the credentials (\(client.configuration.endpoint.baseURL))"
        } catch {
            switch error.kind {
            case .unauthorized, .configuration:
                result.outcome = .refused
                result.detail =
                    "the App Store refused the credentials (HTTP 401 at \(client.configuration.endpoint.baseURL)): "
                    + "the key ID, issuer ID, private key or bundle ID is wrong, or the key was revoked in App Store Connect"
            case .apiError where (error.httpStatus ?? 0) < 500 && error.httpStatus != 429:
                // Refused for another reason (a date the App Store's clock finds odd, say): it got past authentication.
                result.detail = "the App Store accepted the credentials (\(client.configuration.endpoint.baseURL) answered \(error.detail))"
            default:
                result.outcome = .unreachable
                result.detail = "the App Store could not be asked (\(client.configuration.endpoint.baseURL)): \(error.detail)"
            }
        }
        return result
    }
}
