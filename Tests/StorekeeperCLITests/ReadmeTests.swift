import Foundation
import Glibc
import StorekeeperTesting
import Testing

/// The README's commands, run as a reader runs them: every `sh` block, in order, in one shell, from a directory with
/// `../shared` beside it, with the built binary on the `PATH` (`swift run storekeeper …` runs it; `swift build` and
/// `swift test` are this build and this suite). The ports the README names, 8080 and 8090, become free ones the OS
/// chose. Blocks that only show something (output, PostgreSQL URLs, Swift code) are `console` or `swift` blocks.
@Suite("README")
struct ReadmeTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The text of every block fenced as `sh`, in order.
    static func shellBlocks(_ markdown: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring]? = nil
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```sh" {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else if current != nil {
                current!.append(line)
            }
        }
        return blocks
    }

    @Test("every sh block of the README runs as written, in order, and succeeds")
    func readmeRuns() async throws {
        let blocks = Self.shellBlocks(try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8))
        #expect(blocks.count >= 6, "the README's runnable blocks were found")
        let root = try CLI.temporaryDirectory("readme")
        defer { try? FileManager.default.removeItem(at: root) }
        let work = root.appendingPathComponent("storekeeper")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        // `../shared`, as beside a clone.
        try FileManager.default.createSymbolicLink(
            at: root.appendingPathComponent("shared"), withDestinationURL: CLI.corpus.deletingLastPathComponent().deletingLastPathComponent())
        let (server, simulator) = (try CLI.freePort(), try CLI.freePort())
        let body = blocks.joined(separator: "\n").replacingOccurrences(of: "8080", with: String(server)).replacingOccurrences(
            of: "8090", with: String(simulator))
        let script = """
            set -euo pipefail
            trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
            swift() {
              case "$1" in
                run) shift; [ "$1" = storekeeper ] && shift; storekeeper "$@" ;;
                build) ;;
                test) echo "(swift test: the suite running this)" ;;
                *) echo "swift $*: not run by the README test" >&2; return 1 ;;
              esac
            }
            set -x
            \(body)
            """
        let file = root.appendingPathComponent("readme.sh")
        try script.write(to: file, atomically: true, encoding: .utf8)
        let path = CLI.binary.deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let log = root.appendingPathComponent("readme.log")
        let walkthrough = try ChildProcess(
            "/bin/bash", [file.path],
            // The simulator commands' default --url, moved with the port.
            environment: ["PATH": path, "STOREKEEPER_SIMULATOR_URL": "http://127.0.0.1:\(simulator)"], directory: work, output: .file(log),
            error: .sameAsOutput)
        let status = await walkthrough.wait().status
        // The trace shows the commands as run; the app API key they pass is masked before anything is shown.
        let output = (status, String(decoding: try Data(contentsOf: log), as: UTF8.self).replacing(#/sk_[A-Za-z0-9_-]{20,}/#, with: "sk_***"))
        #expect(output.0 == 0, "the README's commands failed; the end of their output:\n\(output.1.suffix(4_000))")
        // What the walkthrough says happens, happened.
        #expect(output.1.contains("creating a new, empty one"), "serve said it created the ledger")
        #expect(output.1.contains(#""missingCount" : 1"#), "the dry run found the purchase made while the server was down")
        #expect(output.1.contains(#""applied" : 1"#), "recover applied it")
        #expect(output.1.contains(#""customerId":"zoe","entitlements":[{"entitlement":"pro.monthly""#), "zoe is entitled to what she bought")
        #expect(
            !output.1.contains(
                try String(contentsOf: work.appendingPathComponent("sim/api/app-api-key"), encoding: .utf8).trimmingCharacters(
                    in: .whitespacesAndNewlines)))
    }
}
