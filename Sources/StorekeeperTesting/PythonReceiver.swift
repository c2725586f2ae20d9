package import Foundation
package import Testing

/// A webhook receiver in Python (`Receiver/receiver.py`) that verifies every request with the `standardwebhooks`
/// package from PyPI (an independent implementation of the specification), misbehaves as its plan says, then
/// accepts; started on a free port.
package final class PythonReceiver: @unchecked Sendable {
    // Safety: every property is set in `init` and only read afterwards.

    /// Whether python3 with the `standardwebhooks` package is installed (`.ci/run` installs it).
    package static let isAvailable = ExternalTool.succeeds(["python3", "-c", "import standardwebhooks"])

    /// Why a test that needs it is skipped.
    package static let missing: Comment = "python3 with the standardwebhooks package is not installed (pip install standardwebhooks; .ci/run does)"

    let process: ChildProcess
    package let port: Int
    /// One JSON line per request received (``Record``).
    package let log: URL

    /// `plan`: what the first requests get (`500`, `slow`, `slower`, `stall`, `staller`, `close`, `big`, `ok`; see the script); every later one `ok`.
    package init(secret: String, plan: [String]) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Receiver/receiver.py")
        log = TestFiles.directory.appendingPathComponent("receiver-\(UUID()).jsonl")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        // The secret by the environment, not the command line (which `ps` shows). Its error output goes to a file beside
        // the log: a receiver holding the test process's own would keep `swift test` waiting after a crash.
        process = try ChildProcess(
            "/usr/bin/env", ["python3", script.path, log.path, plan.joined(separator: ",")], environment: ["RECEIVER_SECRET": secret],
            output: .pipe, error: .file(log.appendingPathExtension("stderr")))
        var line = Data()
        while let byte = try process.output?.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) { line += byte }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            process.kill()
            throw CancellationError()
        }
        self.port = port
    }

    /// One request as the receiver saw it.
    package struct Record: Decodable, Sendable {
        package var id: String?
        package var behaviour: String
        package var verified: Bool
        package var type: String?
        package var customer: String?
        package var sequence: Int?
    }

    /// Every request so far, in arrival order.
    package var records: [Record] {
        let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Record.self, from: Data($0.utf8)) }
    }

    /// The IDs of the events accepted with a verified signature (`ok`, or a `slow` or `slower` answer in time).
    package var delivered: Set<String> {
        Set(records.filter { ["ok", "slow", "slower"].contains($0.behaviour) && $0.verified }.compactMap(\.id))
    }

    /// Stops the receiver (SIGKILL: it holds no state worth a clean exit).
    package func stop() {
        process.kill()
        try? FileManager.default.removeItem(at: log)
        try? FileManager.default.removeItem(at: log.appendingPathExtension("stderr"))
    }

    deinit { stop() }
}
