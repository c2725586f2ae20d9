import Foundation
import StorekeeperTesting

/// Payloads of the real Apple-signed samples in `../shared/conformance/apple-signed/`, decoded without verifying
/// (the models are tested here, signatures in AppStoreSigningTests).
enum CorpusPayloads {
    struct Payload: CustomStringConvertible, Sendable {
        var name: String
        var kind: String
        var json: Data
        var description: String { name }
    }

    static var directory: URL { SharedCorpus.appleSigned }

    static func base64URLDecode(_ segment: Substring) -> Data? {
        var text = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        text += String(repeating: "=", count: (4 - text.count % 4) % 4)
        return Data(base64Encoded: text)
    }

    /// Every payload of every valid sample, and the nested transactions and renewal infos of notifications.
    static let all: [Payload] = {
        guard let files = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else {
            fatalError("conformance corpus not found at \(directory.path); set STOREKEEPER_SHARED_DIR")
        }
        var payloads: [Payload] = []
        for file in files.sorted() where file.hasSuffix(".jws") && !file.hasPrefix("negative-") {
            let jws = try! String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            let kind = String(file.prefix { $0 != "-" })
            let json = base64URLDecode(jws.split(separator: ".")[1])!
            payloads.append(Payload(name: file, kind: kind, json: json))
            guard kind == "notification",
                let object = try? JSONSerialization.jsonObject(with: json) as? [String: Any],
                let data = object["data"] as? [String: Any]
            else { continue }
            for (field, nestedKind) in [("signedTransactionInfo", "transaction"), ("signedRenewalInfo", "renewalinfo")] {
                if let nested = data[field] as? String {
                    payloads.append(
                        Payload(
                            name: "\(file) \(field)", kind: nestedKind,
                            json: base64URLDecode(nested.split(separator: ".")[1])!
                        )
                    )
                }
            }
        }
        precondition(payloads.count > 50, "only \(payloads.count) corpus payloads found")
        return payloads
    }()
}
