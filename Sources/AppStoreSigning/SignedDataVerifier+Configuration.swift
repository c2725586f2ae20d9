public import AppStoreModels
import Crypto
public import Foundation
public import X509

extension SignedDataVerifier {
    /// When certificate validity is judged.
    public enum ValidationTime: Sendable, Hashable {
        /// At the payload's `signedDate` (`receiptCreationDate` for app transactions), like Apple's libraries with
        /// online checks off. A payload without that date is judged at the current time.
        case signedDate
        /// At the moment of verification.
        case currentTime
        /// At a given date.
        case fixed(Date)
    }

    /// What a verifier trusts and what it expects of the payloads.
    public struct Configuration: Sendable {
        /// Roots a chain may end at (matched byte for byte with `x5c[2]`). Apple Root CA - G3 by default.
        public var trustedRoots: [Certificate]
        /// The app's bundle ID; `nil` leaves it unchecked, which only inspection tools should do.
        public var bundleID: String?
        /// The app's Apple ID; required for production. When set, a sandbox payload that carries one must match.
        public var appAppleID: Int64?
        /// The environment payloads must come from; `nil` leaves it unchecked, which only inspection tools should do.
        public var environment: AppStoreEnvironment?
        /// When certificate validity is judged; `.signedDate` by default.
        public var validationTime: ValidationTime = .signedDate
        /// Chain caching; Apple's 32 chains for 15 minutes by default.
        public var chainCache: ChainCachePolicy = .default
        /// Online revocation checks; off by default.
        public var revocation: RevocationChecking = .disabled
        /// For the Xcode environment only (``xcode(bundleID:certificate:)``): the StoreKit Testing certificate Xcode
        /// exported ("Save Public Certificate"). A JWS is accepted only when its `x5c` is that one certificate, byte
        /// for byte, and its signature is that certificate's key's; validity dates are not judged (Xcode's
        /// certificates last a year).
        public private(set) var xcodeCertificate: Certificate?

        /// A configuration for an app's StoreKit testing in Xcode: JWS signed by the pinned `certificate`, with
        /// `environment` `Xcode`, for `bundleID`. Never for Production or Sandbox: a payload claiming either is refused.
        ///
        /// - Throws: ``VerificationError/Code/invalidConfiguration`` for an empty bundle ID, or a certificate whose key
        ///   is not P-256.
        public static func xcode(bundleID: String, certificate: Certificate) throws(VerificationError) -> Configuration {
            guard !bundleID.isEmpty else { throw VerificationError(.invalidConfiguration, "the bundle ID is empty") }
            guard P256.Signing.PublicKey(certificate.publicKey) != nil else {
                throw VerificationError(
                    .invalidConfiguration, "the Xcode certificate '\(certificate.subject)' has no P-256 key: it cannot have signed ES256 data")
            }
            var configuration = Configuration(trustedRoots: [certificate])
            configuration.bundleID = bundleID
            configuration.environment = .xcode
            configuration.xcodeCertificate = certificate
            return configuration
        }

        /// A configuration for one app in one environment.
        ///
        /// - Throws: ``VerificationError/Code/invalidConfiguration`` for production without `appAppleID`, an empty
        ///   bundle ID, or no trusted roots.
        public init(
            bundleID: String,
            appAppleID: Int64?,
            environment: AppStoreEnvironment,
            trustedRoots: [Certificate] = [.appleRootCAG3]
        ) throws(VerificationError) {
            guard !bundleID.isEmpty else {
                throw VerificationError(.invalidConfiguration, "the bundle ID is empty")
            }
            if environment == .production && appAppleID == nil {
                throw VerificationError(
                    .invalidConfiguration,
                    "production needs the app's Apple ID (appAppleId) so notifications for other apps are rejected"
                )
            }
            guard !trustedRoots.isEmpty else {
                throw VerificationError(.invalidConfiguration, "no trusted root certificates")
            }
            self.trustedRoots = trustedRoots
            self.bundleID = bundleID
            self.appAppleID = appAppleID
            self.environment = environment
        }

        /// A configuration that checks signatures and chains but not bundle ID, app Apple ID or environment.
        ///
        /// For inspection tools such as `storekeeper verify` only: a server that trusts payloads this way accepts
        /// any app's purchases and sandbox purchases as real ones.
        public static func unsafeSkippingClaimChecks(trustedRoots: [Certificate] = [.appleRootCAG3]) -> Configuration {
            Configuration(trustedRoots: trustedRoots)
        }

        private init(trustedRoots: [Certificate]) {
            self.trustedRoots = trustedRoots
        }
    }
}
