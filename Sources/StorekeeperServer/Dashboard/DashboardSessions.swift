import AppStoreSigning
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
        SymmetricKey(size: .bits256).withUnsafeBytes { Base64URL.encode($0) }
    }

    /// An action form's one-time token, bound to the form: 16 random bytes and an HMAC-SHA256 (keyed by the session's
    /// CSRF token) of them and the form's action path, each cut to 16 bytes, in base64url (44 characters). Posted to
    /// another form's path, or under another session, it is refused (``formMatches(_:action:csrf:)``).
    static func formToken(action: String, csrf: String) -> String {
        let nonce = SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }
        return Base64URL.encode(nonce) + Base64URL.encode(formMAC(nonce, action: action, csrf: csrf))
    }

    /// Whether `token` is a form token ``formToken(action:csrf:)`` made for `action` under `csrf`. Paths are compared
    /// percent-decoded (a browser may encode a customer ID's characters its own way).
    static func formMatches(_ token: String, action: String, csrf: String) -> Bool {
        guard token.utf8.count == 44, let nonce = try? Base64URL.decode(token.prefix(22).utf8), nonce.count == 16 else { return false }
        return Dashboard.same(token, Base64URL.encode(nonce) + Base64URL.encode(formMAC(nonce, action: action, csrf: csrf)))
    }

    private static func formMAC(_ nonce: [UInt8], action: String, csrf: String) -> [UInt8] {
        let message = nonce + Array("\n\(action.removingPercentEncoding ?? action)".utf8)
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: Data(csrf.utf8))).prefix(16))
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
    /// the token is not shaped as this server makes them; ``formMatches(_:action:csrf:)`` checks what it was made for).
    func claimForm(_ id: String, _ form: String) -> Bool {
        guard form.utf8.count == 44 else { return false }
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
