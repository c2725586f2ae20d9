import AppStoreModels
package import StorekeeperCore

extension Ledger {
    /// What differs between two ledgers, briefly (a full dump of a ledger is pages of JWS).
    package static func differences(_ a: Ledger, _ b: Ledger) -> [String] {
        var result: [String] = []
        for key in Set(a.transactions.keys).union(b.transactions.keys) where a.transactions[key] != b.transactions[key] {
            let left = a.transactions[key], right = b.transactions[key]
            result.append(
                "transaction \(key): \(left?.source ?? "-")@\(left?.signedDate.epochMilliseconds ?? 0) vs \(right?.source ?? "-")@\(right?.signedDate.epochMilliseconds ?? 0)"
            )
        }
        for key in Set(a.subscriptions.keys).union(b.subscriptions.keys) where a.subscriptions[key] != b.subscriptions[key] {
            let left = a.subscriptions[key], right = b.subscriptions[key]
            result.append(
                "subscription \(key): status \(String(describing: left?.status))@\(left?.statusSignedDate?.epochMilliseconds ?? 0) vs \(String(describing: right?.status))@\(right?.statusSignedDate?.epochMilliseconds ?? 0); renewal \(left?.renewalSignedDate?.epochMilliseconds ?? 0) vs \(right?.renewalSignedDate?.epochMilliseconds ?? 0)"
            )
        }
        if a.explicitLinks != b.explicitLinks { result.append("links") }
        if a.tokenOwners != b.tokenOwners { result.append("tokens") }
        return result
    }
}
