import AppStoreModels
package import StorekeeperCore

extension EventType {
    /// Why a name given for an event type is not one: the name quoted and bounded, with the nearest type when one is
    /// close (`subscription.renew` → `subscription.renewed`), else every type.
    package struct UnknownName: Error {
        package let message: String
    }

    /// `name` as an event type, for the events route's and the admin replay's `type`, `storekeeper events --type` and
    /// the configuration's `eventTypes`; `field` names where it was given, for the error.
    package static func named(_ name: String, field: String) throws(UnknownName) -> EventType {
        if let type = EventType(rawValue: name) { return type }
        let known = allCases.map(\.rawValue)
        let hint =
            DidYouMean.nearest(to: name, among: known).map { ": did you mean \"\($0)\"?" }
            ?? " (one of \(known.sorted().joined(separator: ", ")))"
        throw UnknownName(message: "\(field) \(UntrustedText.quoted(name, limit: 64)) is not an event type\(hint)")
    }
}
