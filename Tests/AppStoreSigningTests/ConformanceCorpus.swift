import Foundation
import StorekeeperTesting
import Testing

/// The real Apple-signed samples in `../shared/conformance/apple-signed/` and what `INDEX.md` says of each.
struct ConformanceCorpus {
    struct Sample: CustomTestStringConvertible, Sendable {
        var file: String
        var kind: String
        var environment: String
        var signedDate: String
        var expected: String
        var jws: String
        var testDescription: String { file }
    }

    static var directory: URL { SharedCorpus.appleSigned }

    /// Every sample listed in INDEX.md. Crashes the test run with a clear message if the corpus is missing, so a
    /// missing corpus can never pass as "no samples".
    static let samples: [Sample] = {
        let index = directory.appendingPathComponent("INDEX.md")
        guard let text = try? String(contentsOf: index, encoding: .utf8) else {
            fatalError("conformance corpus not found at \(index.path); set STOREKEEPER_SHARED_DIR")
        }
        var samples: [Sample] = []
        for line in text.split(separator: "\n") where line.hasPrefix("| ") && line.contains(".jws") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            // | file | kind | environment | bundleId | type | signedDate | leaf notAfter | expected | source |
            let file = cells[1]
            guard let jws = try? String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8) else {
                fatalError("INDEX.md lists \(file) but it cannot be read")
            }
            samples.append(
                Sample(
                    file: file, kind: cells[2], environment: cells[3], signedDate: cells[6], expected: cells[8],
                    jws: jws
                )
            )
        }
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path))?.filter { $0.hasSuffix(".jws") }
        precondition(
            samples.count == files?.count && samples.count > 30,
            "INDEX.md lists \(samples.count) samples but the folder holds \(files?.count ?? 0) .jws files"
        )
        return samples
    }()

    static var valid: [Sample] { samples.filter { $0.expected == "valid" } }
    static var invalid: [Sample] { samples.filter { $0.expected == "invalid" } }
}
