import AppStoreModels
import Hummingbird
import StorekeeperHTTP

/// A request's query parameters, read strictly: a parameter the route does not take, one given twice, or a value a
/// parameter does not take is refused with 400 naming it (`?dryrun=true` must not run a real reconcile because the
/// route reads `dryRun`), never ignored.
struct QueryParameters {
    private var values: [String: String] = [:]

    /// Reads the query of `request`, which may hold only the parameters in `allowed`.
    init(_ request: Request, allowed: [String]) throws(APIError) {
        for (name, value) in request.uri.queryParameters {
            let name = String(name)
            guard allowed.contains(name) else {
                let shown = UntrustedText.quoted(name, limit: 64)
                let hint = DidYouMean.nearest(to: name, among: allowed).map { ": did you mean \"\($0)\"?" }
                    ?? (allowed.isEmpty ? ": this route takes none" : " (this route takes \(allowed.joined(separator: ", ")))")
                throw APIError(.badRequest, "unknown-parameter", "unknown query parameter \(shown)\(hint)")
            }
            guard values[name] == nil else {
                throw APIError(.badRequest, "repeated-parameter", "the query parameter \"\(name)\" is given twice")
            }
            values[name] = String(value)
        }
    }

    /// The parameter's text, if given.
    func string(_ name: String) -> String? { values[name] }

    /// A boolean parameter: `true` or `false`, nothing else.
    func bool(_ name: String) throws(APIError) -> Bool? {
        guard let text = values[name] else { return nil }
        switch text {
        case "true": return true
        case "false": return false
        default:
            throw APIError(.badRequest, "invalid-parameter", "\(name) must be true or false, not \(UntrustedText.quoted(text, limit: 64))")
        }
    }

    /// An App Store environment parameter: `Production` or `Sandbox`.
    func environment(_ name: String = "environment") throws(APIError) -> AppStoreEnvironment? {
        guard let text = values[name] else { return nil }
        guard let environment = [AppStoreEnvironment.production, .sandbox].first(where: { $0.rawValue == text }) else {
            throw APIError(.badRequest, "invalid-parameter", "\(name) must be Production or Sandbox, not \(UntrustedText.quoted(text, limit: 64))")
        }
        return environment
    }
}
