import Foundation

/// A program from outside the package that a test runs (Python's reference libraries, schemathesis, a browser), found
/// on the `PATH`: whether it is installed, and its run.
package enum ExternalTool {
    /// Whether `arguments` (a command and its arguments) runs and exits 0, its output discarded: `["python3", "-c",
    /// "import playwright"]`. Blocks: for a test's `.enabled(if:)`, never from a running test.
    package static func succeeds(_ arguments: [String]) -> Bool {
        guard let child = try? ChildProcess("/usr/bin/env", arguments) else { return false }
        return child.waitUntilExit() == .exited(0)
    }

    /// Runs `arguments` to the end with `environment` added to this process's (secrets go there, never on the command
    /// line, which `ps` shows); its output and error output together, and whether it exited 0.
    ///
    /// The waiting is done on a thread of its own, never on one of Swift's concurrency threads: the server a test runs
    /// in this process answers the program on those (two on this machine), and two tests each blocking one while their
    /// program waits for the server is a deadlock until the program times out.
    package static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (output: String, passed: Bool) {
        let result = try await ChildProcess.run("/usr/bin/env", arguments, environment: environment, mergingError: true)
        return (String(decoding: result.output, as: UTF8.self), result.termination == .exited(0))
    }
}
