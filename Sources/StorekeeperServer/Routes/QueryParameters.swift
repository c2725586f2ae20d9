import AppStoreModels
import Foundation
import Hummingbird
import StorekeeperHTTP

/// A request's query parameters, read strictly: a parameter the route does not take, one given twice, or a value a
/// parameter does not take is refused with 400 naming it (`?dryrun=true` must not run a real reconcile because the
/// route reads `dryRun`), never ignored. Checked in place, on every read: no copy of the query is made.
struct QueryParameters {
    private let parameters: Parameters

    /// Reads the query of `request`, which may hold only the parameters in `allowed`.
    init(_ request: Request, allowed: [String]) throws(APIError) {
        parameters = request.uri.queryParameters
        var index = 0
        for (name, value) in parameters {
            defer { index += 1 }
            // `?&limit=1` and `?limit=1&`: an empty piece between separators is no parameter.
            if name.isEmpty, value.isEmpty { continue }
            guard allowed.contains(where: { $0 == name }) else {
                let shown = UntrustedText.quoted(String(name), limit: 64)
                if name.contains("%"), let decoded = String(name).removingPercentEncoding, allowed.contains(decoded) {
                    throw APIError(
                        .badRequest, .unknownParameter,
                        "query parameter names are read as written, not percent-decoded: write \"\(decoded)\", not \(shown)")
                }
                let hint =
                    DidYouMean.nearest(to: String(name), among: allowed).map { ": did you mean \"\($0)\"?" }
                    ?? (allowed.isEmpty ? ": this route takes none" : " (this route takes \(allowed.joined(separator: ", ")))")
                throw APIError(.badRequest, .unknownParameter, "unknown query parameter \(shown)\(hint)")
            }
            // A route takes a few parameters: the earlier ones are looked through, not collected.
            guard !parameters.prefix(index).contains(where: { $0.key == name }) else {
                throw APIError(.badRequest, .repeatedParameter, "the query parameter \"\(name)\" is given twice")
            }
        }
    }

    /// The parameter's text, if given.
    func string(_ name: String) -> String? { parameters.get(name) }

    /// A boolean parameter: `true` or `false`, nothing else.
    func bool(_ name: String) throws(APIError) -> Bool? {
        guard let text = parameters.get(name) else { return nil }
        switch text {
        case "true": return true
        case "false": return false
        default:
            throw APIError(.badRequest, .invalidParameter, "\(name) must be true or false, not \(UntrustedText.quoted(text, limit: 64))")
        }
    }

    /// A customer ID parameter (`customer`): 1-128 ASCII letters, digits and `-_.@:`, as in the customer routes' paths.
    func customerId(_ name: String = "customer") throws(APIError) -> String? {
        guard let text = parameters.get(name) else { return nil }
        guard CustomerAPI.validCustomerId(text) else {
            throw APIError(.badRequest, .invalidCustomerId, "\(name) must be a customer ID (1-128 ASCII letters, digits and -_.@:)")
        }
        return text
    }

    /// An App Store environment parameter: `Production` or `Sandbox`.
    func environment(_ name: String = "environment") throws(APIError) -> AppStoreEnvironment? {
        try Self.environment(parameters.get(name), name)
    }

    /// `text` as an environment (nil when absent): `Production` or `Sandbox`, nothing else.
    static func environment(_ text: String?, _ name: String = "environment") throws(APIError) -> AppStoreEnvironment? {
        guard let text else { return nil }
        guard let environment = [AppStoreEnvironment.production, .sandbox, .xcode].first(where: { $0.rawValue == text }) else {
            throw APIError(
                .badRequest, .invalidParameter, "\(name) must be Production, Sandbox or Xcode, not \(UntrustedText.quoted(text, limit: 64))")
        }
        return environment
    }

    /// An integer parameter within `range`.
    func int(_ name: String, in range: ClosedRange<Int>) throws(APIError) -> Int? {
        guard let text = parameters.get(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), not \(UntrustedText.quoted(text, limit: 64))")
        }
        return value
    }
}
