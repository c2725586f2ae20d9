import AppStoreModels
public import Crypto
import Foundation

/// An App Store Server API key: the `.p8` private key from App Store Connect with its key ID and issuer ID, and
/// the bundle ID the tokens are for.
///
/// The private key never appears in descriptions, mirrors or errors.
public struct AppStoreAPIKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The issuer ID (a UUID) from the Keys page in App Store Connect.
    public var issuerID: String
    /// The key's ID, e.g. `2X9R4HXF34`.
    public var keyID: String
    /// The app's bundle ID (the token's `bid`).
    public var bundleID: String
    let privateKey: P256.Signing.PrivateKey

    /// A key from a PEM string: PKCS#8 (`-----BEGIN PRIVATE KEY-----`, the `.p8` format) or SEC1. Escaped `\n`
    /// sequences, as in environment variables, are accepted.
    public init(issuerID: String, keyID: String, bundleID: String, privateKeyPEM: String) throws(SigningError) {
        for (name, value) in [("issuer ID", issuerID), ("key ID", keyID), ("bundle ID", bundleID)] where value.isEmpty {
            throw SigningError(.missingCredential, "the \(name) is empty")
        }
        let pem = privateKeyPEM.replacingOccurrences(of: "\\n", with: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        guard pem.hasPrefix("-----BEGIN") else {
            throw SigningError(.invalidPrivateKey, "the private key is not PEM (expected a BEGIN PRIVATE KEY block)")
        }
        do {
            self.privateKey = try P256.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw SigningError(
                .invalidPrivateKey,
                "the private key is not a P-256 key in PKCS#8 (.p8) or SEC1 PEM form"
            )
        }
        self.issuerID = Self.canonical(issuerID: issuerID)
        self.keyID = keyID
        self.bundleID = bundleID
    }

    /// A key read from a `.p8` file, which only its owner may read or write (as App Store Connect's download asks:
    /// the key signs for the whole team); a file group or others may read is refused, naming the fix (`chmod 600`).
    public init(issuerID: String, keyID: String, bundleID: String, privateKeyFile path: String) throws(SigningError) {
        // A key's text given where its path belongs is never echoed (it would land in a log).
        guard !SecretFile.looksLikeKeyText(path) else {
            throw SigningError(
                .unreadableKeyFile, "the private key file's path holds what looks like a key's text, not a path: give the .p8 file's path")
        }
        let shown = UntrustedText.quoted(path, limit: 256)
        let data: [UInt8]
        switch SecretFile.read(path) {
        case .success(let contents): data = contents
        case .failure(.exposed(let mode)):
            throw SigningError(.exposedKeyFile, SecretFile.describe(.exposed(mode: mode), shown, what: "private key file"))
        case .failure(let problem):
            throw SigningError(.unreadableKeyFile, SecretFile.describe(problem, shown, what: "private key file"))
        }
        guard let pem = String(validating: data, as: UTF8.self) else {
            throw SigningError(.invalidPrivateKey, "the private key file \(shown) is not text (a .p8 file is PEM text: a BEGIN PRIVATE KEY block)")
        }
        do {
            try self.init(issuerID: issuerID, keyID: keyID, bundleID: bundleID, privateKeyPEM: pem)
        } catch {
            throw SigningError(error.code, "\(shown): \(error.message)")
        }
    }

    /// A UUID in lower case, as App Store Connect shows issuer IDs (a token whose `iss` is the same UUID in upper case
    /// is refused with a bare 401); anything else as given.
    static func canonical(issuerID: String) -> String {
        UUID(uuidString: issuerID) != nil ? issuerID.lowercased() : issuerID
    }

    /// A key around an existing P-256 private key (the simulator makes its own).
    public init(issuerID: String, keyID: String, bundleID: String, privateKey: P256.Signing.PrivateKey) {
        self.issuerID = Self.canonical(issuerID: issuerID)
        self.keyID = keyID
        self.bundleID = bundleID
        self.privateKey = privateKey
    }

    /// The public half, which App Store Connect (or the simulator) uses to check tokens.
    public var publicKey: P256.Signing.PublicKey { privateKey.publicKey }

    public var description: String {
        "AppStoreAPIKey(issuerID: \(issuerID), keyID: \(keyID), bundleID: \(bundleID), privateKey: <redacted>)"
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror {
        Mirror(self, children: ["issuerID": issuerID, "keyID": keyID, "bundleID": bundleID, "privateKey": "<redacted>"])
    }
}
