import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import StorekeeperCore
import StorekeeperHTTP

/// The consumption requests of the support API: Apple's `CONSUMPTION_REQUEST`s with their deadlines and what became
/// of them, and a person's answer to those the policy left to one (``ConsumptionPolicy``).
extension SupportAPI {
    func addConsumptionRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/consumption-requests") { request, context in
            try await consumptionRequests(request, identity: try context.requireIdentity())
        }
        group.get("/consumption-requests/:uuid") { request, context in
            _ = try QueryParameters(request, allowed: [])
            return StorekeeperApplication.jsonResponse(
                try await consumptionRequest(context.pathValue("uuid"), identity: try context.requireIdentity()))
        }
        group.post("/consumption-requests/:uuid/answer") { request, context in
            try await answerConsumptionRequest(request, uuid: context.pathValue("uuid"), identity: try context.requireIdentity())
        }
    }

    /// `GET /v1/support/consumption-requests[?state=manual,pending][&limit=N]`: the key's apps' requests, the nearest
    /// deadline first (by default those still open: `new`, `pending`, `manual`).
    func consumptionRequests(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["state", "limit"])
        let states = try Self.states(query.string("state"))
        let limit = try query.int("limit", in: 1...500) ?? 100
        let found: [ConsumptionRequestRecord]
        do {
            found = try await store.consumptionRequests(.apps(apps(for: identity), states: states, limit: limit))
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        struct Listed: Encodable { var consumptionRequests: [ConsumptionRequestRecord] }
        return StorekeeperApplication.jsonResponse(Listed(consumptionRequests: found))
    }

    /// The states a `state` parameter names (comma-separated); the open ones (`new`, `pending`, `manual`) when absent.
    static func states(_ given: String?) throws(APIError) -> [ConsumptionRequestRecord.State] {
        guard let given else { return [.new, .pending, .manual] }
        var states: [ConsumptionRequestRecord.State] = []
        for word in given.split(separator: ",", omittingEmptySubsequences: false) {
            guard let state = ConsumptionRequestRecord.State(rawValue: String(word)) else {
                throw APIError(
                    .badRequest, .invalidParameter,
                    "state \(UntrustedText.quoted(String(word), limit: 32)) is not one of \(ConsumptionRequestRecord.State.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            states.append(state)
        }
        return states
    }

    /// One request of the key's apps, or 404.
    func consumptionRequest(_ uuid: String, identity: APIKeyIdentity) async throws -> ConsumptionRequestRecord {
        let unknown = APIError(
            .notFound, .unknownConsumptionRequest,
            "no consumption request \(UntrustedText.quoted(uuid, limit: 64)) for \(identity.bundleId ?? "any app")")
        guard uuid.utf8.count <= 64 else { throw unknown }
        let found: ConsumptionRequestRecord?
        do {
            // Apple's UUIDs are lower case; one pasted in upper case is the same request.
            found = try await store.consumptionRequest(uuid.lowercased())
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        // A request not decided yet has no app: it is shown once the job has read it (within seconds).
        guard let found, let bundleId = found.bundleId, let environment = found.environment,
            apps(for: identity).contains(VerifierKey(bundleId: bundleId, environment: environment))
        else { throw unknown }
        return found
    }

    /// `POST /v1/support/consumption-requests/{uuid}/answer` with Send Consumption Information's fields
    /// (`deliveryStatus`, `sampleContentProvided`, optional `refundPreference` and `consumptionPercentage`): a person's
    /// answer to a request waiting for one; it is sent within seconds by the responder job (and retried), and the
    /// audit log names the key. 409 when the request is not waiting for a person.
    func answerConsumptionRequest(_ request: Request, uuid: String, identity: APIKeyIdentity) async throws -> Response {
        _ = try QueryParameters(request, allowed: [])
        let shape = #"{"deliveryStatus": "DELIVERED", "sampleContentProvided": false, "refundPreference": "DECLINE"}"#
        let body = try await Self.body(request, as: ConsumptionAnswer.self, shape: shape)
        return StorekeeperApplication.jsonResponse(try await answer(uuid, with: body, identity: identity))
    }

    /// Takes a person's answer to a request waiting for one (checked against Apple's rules), logged; the request, now
    /// due.
    func answer(_ uuid: String, with answer: ConsumptionAnswer, identity: APIKeyIdentity) async throws -> ConsumptionRequestRecord {
        if let problem = answer.problem() { throw APIError(.badRequest, .invalidParameter, problem) }
        let existing = try await consumptionRequest(uuid, identity: identity)
        let answered: ConsumptionRequestRecord?
        do {
            answered = try await store.answerConsumptionRequest(
                existing.notificationUUID, answer: answer, decidedBy: "key \(identity.name)", at: now())
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the answer could not be stored; retry")
        }
        guard let answered else {
            // Why, from the request as it is now: read before the answer, it said `manual` when another person's answer
            // had just been taken (which was told as "its 12 hours have passed").
            let current = (try? await store.consumptionRequest(existing.notificationUUID)) ?? nil
            let state = current ?? existing
            let why =
                state.state == .manual
                ? "its 12 hours have passed" : "it is \(state.state.rawValue)" + (state.decidedBy.map { " (decided by \($0))" } ?? "")
            throw APIError(.conflict, .consumptionRequestClosed, "consumption request \(uuid) is not waiting for a person: \(why)")
        }
        logger.info(
            "support action",
            metadata: [
                "support.action": "consumption-answer", "api_key": .string(identity.name), "app.bundle_id": .string(answered.bundleId ?? ""),
                "notification.uuid": .string(uuid),
            ])
        return answered
    }
}
