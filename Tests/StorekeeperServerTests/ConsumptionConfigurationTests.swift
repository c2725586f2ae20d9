import AppStoreModels
import AppStoreSigning
import AppStoreSimulator
import Crypto
import Foundation
import StorekeeperCore
import StorekeeperServer
import StorekeeperTesting
import Testing

@Suite("Storekeeper server: the consumption policy in the configuration")
struct ConsumptionConfigurationTests {
    static func app(_ consumption: String) -> String {
        #"{"apps": [{"bundleId": "com.example.app", "environments": ["Sandbox"], "consumption": \#(consumption)}]}"#
    }

    @Test("a policy is read whole; mistakes in it are named with their place, and rules without credentials are refused")
    func policy() throws {
        let read = try StrictConfigurationTests.load(Self.app(#"{"policy": "manual"}"#))
        #expect(read.apps[0].consumption == ConsumptionPolicy(policy: .manual))
        #expect(try StrictConfigurationTests.load(#"{"apps": [\#(StrictConfigurationTests.app)]}"#).apps[0].consumption.policy == .manual)
        for (consumption, expected) in [
            (#"{"polcy": "rules"}"#, #"unknown key "polcy""#),
            (#"{"policy": "rules", "rules": [{"when": {"productType": ["Consumable"]}, "then": "manual"}]}"#, #"did you mean "productTypes"?"#),
            (#"{"policy": "always"}"#, "always"),
            (#"{"policy": "manual", "rules": [{"when": {}, "then": "maybe"}]}"#, #"is not an outcome: give "manual", "none" or an answer object"#),
            (
                #"{"policy": "manual", "rules": [{"when": {"maxRefunds": 0}, "then": {"deliveryStatus": "DELIVERED", "refundPreference": "GRANT_PRORATED"}}]}"#,
                "consumption.rules[0].then: GRANT_PRORATED needs a consumptionPercentage"
            ),
            (
                #"{"policy": "rules", "rules": [{"when": {}, "then": "manual"}]}"#,
                "answers through the App Store Server API, and the app has no serverAPI credentials"
            ),
        ] {
            let error = #expect(throws: ConfigurationError.self) { try StrictConfigurationTests.load(Self.app(consumption)) }
            #expect(error?.message.contains(expected) == true, "\(consumption): \(error?.message ?? "")")
        }
    }
}
