import AppStoreModels
import AppStoreSigning

/// What one step of a unit of work needs read, answered together by the backend inside its write transaction.
package struct LedgerReads: Sendable {
    /// Notifications to claim for this transaction: the answer says which of them the ledger already holds. A
    /// backend with one writer may just look them up; one with several concurrent writers must make the database the
    /// arbiter (PostgreSQL: `INSERT … ON CONFLICT DO NOTHING`), so that two writers cannot both see one as new.
    /// Distinct.
    package var claimNotifications: [String]
    /// Families to load, sorted (a backend with concurrent writers locks them, in this order, before reading).
    package var families: [LedgerKey] = []
    /// App account tokens whose owners to read (a backend with concurrent writers locks them too).
    package var tokens: Set<AppAccountTokenKey> = []
    /// Whether to say which of `tokens` without an owner a customer's erasure retired (a submission asks: it must not
    /// take such a token).
    package var erasedTokens = false

    /// A backend answers in this order: it locks `families` and `tokens` (in one sorted order, so that two steps can
    /// never hold each other's locks), then claims the notifications, and only when one of them is new (or none was
    /// asked for) loads the families and reads the tokens' owners. Claiming after locking matters with concurrent
    /// writers: a writer that has claimed a notification holds its families' locks, so no other writer can wait for
    /// the claim while holding a lock that writer needs.
    package init(claimNotifications: [String] = [], families: [LedgerKey] = [], tokens: Set<AppAccountTokenKey> = []) {
        self.claimNotifications = claimNotifications
        self.families = families.sorted()
        self.tokens = tokens
    }
}
