import Crypto
import Foundation
import Synchronization

/// The dashboard's signed-in sessions, in this process's memory: a random ID (the cookie's value, 256 bits) names a
/// support or admin key's identity and the session's CSRF token. A session ends when it has not been used for
/// ``idleLimit``, after ``absoluteLimit`` whatever, on sign-out, and when the process stops (every instance keeps its
/// own: behind a load balancer, route each person to one instance, or sign in again).
final class DashboardSessions: Sendable {
    struct Session: Sendable {
        var identity: APIKeyIdentity
        /// The token every form of this session carries.
        var csrf: String
        var createdAt: ContinuousClock.Instant
        var lastUsedAt: ContinuousClock.Instant
        /// The one-time tokens of the action forms this session has sent (the latest ``formMemory``): a form sent
        /// again (a reload, a double click, a replay) is refused instead of acting twice.
        var sentForms: [String] = []
    }

    /// How many sent forms a session remembers.
    static let formMemory = 256

    let idleLimit: Duration
    let absoluteLimit: Duration
    /// The most sessions kept: a new one past it ends the least recently used.
    let capacity: Int
    private let sessions = Mutex<[String: Session]>([:])

    init(idleLimit: Duration = .seconds(30 * 60), absoluteLimit: Duration = .seconds(12 * 3_600), capacity: Int = 10_000) {
        self.idleLimit = idleLimit
        self.absoluteLimit = absoluteLimit
        self.capacity = capacity
    }

    /// 32 random bytes, base64url: a session ID or a CSRF token.
    static func token() -> String {
        let bytes = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
        return bytes.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// A new session for `identity`: its ID and its session.
    func start(_ identity: APIKeyIdentity) -> (id: String, session: Session) {
        let now = ContinuousClock.now
        let session = Session(identity: identity, csrf: Self.token(), createdAt: now, lastUsedAt: now)
        let id = Self.token()
        sessions.withLock { sessions in
            if sessions.count >= capacity, let oldest = sessions.min(by: { $0.value.lastUsedAt < $1.value.lastUsedAt })?.key {
                sessions[oldest] = nil
            }
            sessions[id] = session
        }
        return (id, session)
    }

    /// The live session `id` names (its use recorded), or nil: unknown, idle too long, or too old.
    func session(_ id: String) -> Session? {
        let now = ContinuousClock.now
        return sessions.withLock { sessions in
            guard var session = sessions[id] else { return nil }
            guard now - session.lastUsedAt < idleLimit, now - session.createdAt < absoluteLimit else {
                sessions[id] = nil
                return nil
            }
            session.lastUsedAt = now
            sessions[id] = session
            return session
        }
    }

    /// Records that session `id` sent the form whose one-time token is `form`: false when it had sent it already (or
    /// the token is not one this server makes).
    func claimForm(_ id: String, _ form: String) -> Bool {
        guard form.utf8.count == 43 else { return false }
        return sessions.withLock { sessions in
            guard var session = sessions[id], !session.sentForms.contains(form) else { return false }
            session.sentForms.append(form)
            if session.sentForms.count > Self.formMemory { session.sentForms.removeFirst(session.sentForms.count - Self.formMemory) }
            sessions[id] = session
            return true
        }
    }

    func end(_ id: String) {
        _ = sessions.withLock { $0.removeValue(forKey: id) }
    }
}
