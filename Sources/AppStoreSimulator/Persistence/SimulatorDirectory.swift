package import AppStoreModels
package import AppStoreSigning
package import Crypto
package import Foundation
import SwiftASN1
import X509

/// The simulator's directory: its catalog, state, test CA and App Store Server API key.
///
/// ```
/// DIR/catalog.json                 what the App Store sells (edit it; checked at start)
/// DIR/simulator.sqlite             customers, transactions, subscriptions, notifications, the clock (SimulatorStore)
/// DIR/state.json.imported          a simulator's earlier storage, kept after its import into simulator.sqlite
/// DIR/ca/root.pem                  give this to verifiers (`storekeeper verify --root DIR/ca/root.pem`)
/// DIR/ca/intermediate.pem, ca/intermediate-key.pem
/// DIR/api/AuthKey_<KEY ID>.p8      the API key clients sign tokens with
/// DIR/api/key.json                 {"keyId", "issuerId"}
/// ```
package struct SimulatorDirectory: Sendable {
    package let url: URL

    package init(_ url: URL) { self.url = url }

    package var catalogFile: URL { url.appendingPathComponent("catalog.json") }
    /// The simulator's database (``SimulatorStore``).
    package var databaseFile: URL { url.appendingPathComponent("simulator.sqlite") }
    /// Where a simulator made before the database kept its state (format 1); imported on first open.
    package var stateFile: URL { url.appendingPathComponent("state.json") }
    /// The `state.json` after its import, kept for reference (nothing reads it).
    package var importedStateFile: URL { url.appendingPathComponent("state.json.imported") }
    package var rootCertificateFile: URL { url.appendingPathComponent("ca/root.pem") }
    var intermediateCertificateFile: URL { url.appendingPathComponent("ca/intermediate.pem") }
    var intermediateKeyFile: URL { url.appendingPathComponent("ca/intermediate-key.pem") }
    package var apiKeyInfoFile: URL { url.appendingPathComponent("api/key.json") }

    /// Identifies the API key clients use; the private key is in `api/AuthKey_<keyId>.p8`.
    package struct APIKeyInfo: Codable, Hashable, Sendable {
        package var keyId: String
        package var issuerId: String

        package init(keyId: String, issuerId: String) {
            self.keyId = keyId
            self.issuerId = issuerId
        }
    }

    package func apiPrivateKeyFile(keyId: String) -> URL { url.appendingPathComponent("api/AuthKey_\(keyId).p8") }

    /// Writes a new simulator: the sample catalog (or `catalog`), a fresh test CA, a fresh API key, and an empty
    /// state whose clock starts at `now`. Refuses a directory that already holds a simulator.
    @discardableResult
    package static func initialize(
        at url: URL,
        catalog: Catalog = .sample,
        environment: AppStoreEnvironment = .sandbox,
        renewalRate: RenewalRate = .realTime,
        now: Date = Date()
    ) throws(SimulatorError) -> SimulatorDirectory {
        let directory = SimulatorDirectory(url)
        try catalog.validate()
        for file in [directory.databaseFile, directory.stateFile] where FileManager.default.fileExists(atPath: file.path) {
            throw SimulatorError(.conflict, "\(url.path) already holds a simulator (\(file.lastPathComponent) exists)")
        }
        var options = TestCertificateAuthority.Options()
        options.names = .storekeeper("Storekeeper Simulator")
        options.validity = Date(timeIntervalSince1970: 1_577_836_800)...Date(timeIntervalSince1970: 2_366_841_600)
        let authority: TestCertificateAuthority
        do {
            authority = try TestCertificateAuthority.generate(options: options)
        } catch {
            throw SimulatorError(.storage, "could not make the test CA: \(error)")
        }
        let apiKey = P256.Signing.PrivateKey()
        let keyId = String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(10))
        let info = APIKeyInfo(keyId: keyId, issuerId: UUID().uuidString.lowercased())
        try directory.write(directory.catalogFile, try encode(catalog))
        try directory.write(directory.rootCertificateFile, Data(pem(authority.rootCertificate).utf8))
        try directory.write(directory.intermediateCertificateFile, Data(pem(authority.intermediateCertificate).utf8))
        try directory.write(directory.intermediateKeyFile, Data(authority.intermediatePrivateKeyPEM.utf8), secret: true)
        try directory.write(directory.apiPrivateKeyFile(keyId: keyId), Data(apiKey.pemRepresentation.utf8), secret: true)
        try directory.write(directory.apiKeyInfoFile, try encode(info))
        var state = SimulatorState(environment: environment, renewalRate: renewalRate, now: now)
        try SimulatorStore(path: directory.databaseFile.path).write(state.takeChanges())
        return directory
    }

    // MARK: Loading

    package func loadCatalog() throws(SimulatorError) -> Catalog {
        let catalog: Catalog = try decode(Catalog.self, from: catalogFile)
        try catalog.validate()
        return catalog
    }

    /// The simulator's state as its database holds it.
    package func loadState() throws(SimulatorError) -> SimulatorState {
        try openStore().load()
    }

    /// Opens the simulator's database. A directory made before the database (it has a `state.json`, format 1) is
    /// imported on first open, in one transaction, and its `state.json` renamed `state.json.imported`.
    package func openStore() throws(SimulatorError) -> SimulatorStore {
        let hasDatabase = FileManager.default.fileExists(atPath: databaseFile.path)
        let hasStateFile = FileManager.default.fileExists(atPath: stateFile.path)
        guard hasDatabase || hasStateFile else {
            throw SimulatorError(.storage, "\(url.path) holds no simulator (no simulator.sqlite); run `storekeeper simulator init` first")
        }
        let store = try SimulatorStore(path: databaseFile.path)
        guard try !store.holdsState() else { return store }
        guard hasStateFile else {
            throw SimulatorError(.storage, "\(databaseFile.path) holds no simulator; run `storekeeper simulator init` in a new directory")
        }
        var state = try loadStateFile()
        state.markAllChanged()
        try store.write(state.takeChanges())
        try? FileManager.default.moveItem(at: stateFile, to: importedStateFile)
        return store
    }

    /// The state kept in `state.json` by a simulator made before the database.
    private func loadStateFile() throws(SimulatorError) -> SimulatorState {
        struct Version: Decodable { var formatVersion: Int? }
        let version = (try? Data(contentsOf: stateFile)).flatMap { try? JSONDecoder().decode(Version.self, from: $0) }
        if let version, version.formatVersion != SimulatorState.currentFormatVersion {
            throw SimulatorError(
                .conflict,
                "state.json has format \(version.formatVersion.map(String.init) ?? "0 (an early build)"); this simulator imports format \(SimulatorState.currentFormatVersion). Start a new one with `storekeeper simulator init`"
            )
        }
        return try decode(SimulatorState.self, from: stateFile)
    }

    package func loadAuthority() throws(SimulatorError) -> TestCertificateAuthority {
        do {
            let root = try Certificate(pemEncoded: try String(contentsOf: rootCertificateFile, encoding: .utf8))
            let intermediate = try Certificate(
                pemEncoded: try String(contentsOf: intermediateCertificateFile, encoding: .utf8)
            )
            let key = try String(contentsOf: intermediateKeyFile, encoding: .utf8)
            var options = TestCertificateAuthority.Options()
            options.names = .storekeeper("Storekeeper Simulator")
            return try TestCertificateAuthority(
                rootCertificate: root, intermediateCertificate: intermediate, intermediatePrivateKeyPEM: key, options: options
            )
        } catch {
            throw SimulatorError(.storage, "cannot load the test CA from \(url.appendingPathComponent("ca").path): \(error)")
        }
    }

    package func loadAPIKeyInfo() throws(SimulatorError) -> APIKeyInfo {
        try decode(APIKeyInfo.self, from: apiKeyInfoFile)
    }

    /// The API key's public half, which tokens must verify with.
    package func loadAPIPublicKey() throws(SimulatorError) -> P256.Signing.PublicKey {
        let info = try loadAPIKeyInfo()
        do {
            let pem = try String(contentsOf: apiPrivateKeyFile(keyId: info.keyId), encoding: .utf8)
            return try P256.Signing.PrivateKey(pemRepresentation: pem).publicKey
        } catch {
            throw SimulatorError(.storage, "cannot load the API key api/AuthKey_\(info.keyId).p8")
        }
    }

    // MARK: Saving

    private func write(_ file: URL, _ data: Data, secret: Bool = false) throws(SimulatorError) {
        do {
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: file, options: .atomic)
            if secret {
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
            }
        } catch {
            throw SimulatorError(.storage, "cannot write \(file.path): \(error.localizedDescription)")
        }
    }

    private func decode<T: Decodable>(_ type: T.Type, from file: URL) throws(SimulatorError) -> T {
        let data: Data
        do {
            data = try Data(contentsOf: file)
        } catch {
            throw SimulatorError(.storage, "cannot read \(file.path); run `storekeeper simulator init` first")
        }
        do {
            return try AppStoreJSON.makeDecoder().decode(type, from: data)
        } catch {
            throw SimulatorError(.invalidRequest, "\(file.lastPathComponent) is not valid: \(error)")
        }
    }

    static func encode(_ value: some Encodable) throws(SimulatorError) -> Data {
        do {
            return try AppStoreJSON.makeEncoder(prettyPrinted: true).encode(value)
        } catch {
            throw SimulatorError(.storage, "cannot encode \(type(of: value)): \(error)")
        }
    }

    private static func pem(_ certificate: Certificate) throws(SimulatorError) -> String {
        do {
            return try certificate.serializeAsPEM().pemString
        } catch {
            throw SimulatorError(.storage, "cannot encode a certificate: \(error)")
        }
    }
}
