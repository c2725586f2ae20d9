import AppStoreModels
import Foundation

/// A readable list of steps the simulator plays: customers buy, the clock moves, billing fails, refunds happen.
///
/// One step per line; `#` starts a comment. Customers and products are named; a subscription is named by its
/// customer and product (the customer's subscription in that product's group), a transaction by its customer and
/// product (their latest transaction of it).
///
/// ```
/// customer alice USA                 # create an Apple Account in a storefront (default USA)
/// family smiths alice bob            # put customers in a family group
/// buy alice pro.monthly              # options: offer=ID quantity=N token=UUID
/// advance 31d                        # s, m, h, d; or advance-to 2026-07-01T00:00:00Z
/// auto-renew alice pro.monthly off   # or on
/// billing alice fail                 # or fix (recovers subscriptions in grace or billing retry)
/// refund alice pro.monthly           # options: reason=0|1 percent=40000 (prorated, milliunits)
/// request-refund alice coins.100 UNINTENDED_PURCHASE
/// decline-refund alice coins.100
/// reverse-refund alice pro.monthly
/// price-increase pro.monthly USA=12990 consent   # or no-consent
/// consent alice pro.monthly
/// remove-from-sale news.weekly
/// extend alice pro.monthly 7
/// leave-family bob
/// stop-sharing alice family.monthly
/// test-notification com.example.storekeeper
/// expect alice pro.monthly premium.monthly      # the customer's entitled products, exactly (none: `expect alice`)
/// expect-balance carol coins.100 3
/// ```
package struct Scenario: Sendable, Hashable {
    package var name: String
    package var steps: [Step]

    /// One parsed step, with its line number for error messages.
    package struct Step: Sendable, Hashable {
        package var line: Int
        package var verb: String
        package var arguments: [String]
        package var options: [String: String]
    }

    static let verbs: [String: ClosedRange<Int>] = [
        "customer": 1...2, "family": 2...7, "buy": 2...2, "advance": 1...1, "advance-to": 1...1,
        "auto-renew": 3...3, "billing": 2...2, "refund": 2...2, "request-refund": 3...3, "decline-refund": 2...2,
        "reverse-refund": 2...2, "price-increase": 2...12, "consent": 2...2, "remove-from-sale": 1...1,
        "extend": 3...3, "leave-family": 1...1, "stop-sharing": 2...2, "test-notification": 1...1,
        "expect": 1...20, "expect-balance": 3...3,
    ]

    /// Parses a scenario; the error names the line and what is wrong with it.
    package init(name: String, text: String) throws(SimulatorError) {
        self.name = name
        var steps: [Step] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let words = line.split(whereSeparator: \.isWhitespace).map(String.init)
            guard let verb = words.first else { continue }
            guard let arity = Self.verbs[verb] else {
                throw SimulatorError(.invalidRequest, "\(name):\(index + 1): unknown step '\(verb)'")
            }
            var arguments: [String] = []
            var options: [String: String] = [:]
            for word in words.dropFirst() {
                if let equals = word.firstIndex(of: "="), verb != "price-increase" {
                    options[String(word[..<equals])] = String(word[word.index(after: equals)...])
                } else {
                    arguments.append(word)
                }
            }
            guard arity.contains(arguments.count) else {
                throw SimulatorError(
                    .invalidRequest,
                    "\(name):\(index + 1): '\(verb)' takes \(arity.lowerBound == arity.upperBound ? "\(arity.lowerBound)" : "\(arity.lowerBound)-\(arity.upperBound)") arguments, got \(arguments.count)"
                )
            }
            steps.append(Step(line: index + 1, verb: verb, arguments: arguments, options: options))
        }
        guard !steps.isEmpty else { throw SimulatorError(.invalidRequest, "\(name): the scenario has no steps") }
        self.steps = steps
    }

    /// `31d`, `5m`, `90s`, `2h` as seconds.
    static func duration(_ text: String) -> TimeInterval? {
        // Decimal digits only (`Double` would also read `0x10`, `1e3`, `inf` and `nan`).
        let number = text.dropLast()
        guard let unit = text.last, !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            let value = Double(number), value >= 0
        else { return nil }
        switch unit {
        case "s": return value
        case "m": return value * 60
        case "h": return value * 3600
        case "d": return value * 86_400
        default: return nil
        }
    }
}
