import Foundation

/// A program from outside the package that a test runs (Python's reference libraries, schemathesis, a browser), found
/// on the `PATH`: whether it is installed, and its run.
package enum ExternalTool {
    /// Whether `arguments` (a command and its arguments) runs and exits 0, its output discarded: `["python3", "-c",
    /// "import playwright"]`. Blocks: for a test's `.enabled(if:)`, never from a running test.
    package static func succeeds(_ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    /// A process and its output pipe, handed to the thread that waits for them.
    private struct Running: @unchecked Sendable {
        // Safety: used by that thread alone once started.
        let process: Process
        let output: Pipe
    }

    /// Runs `arguments` to the end with `environment` added to this process's (secrets go there, never on the command
    /// line, which `ps` shows); its output and error output together, and whether it exited 0.
    ///
    /// The waiting is done on a thread of its own, never on one of Swift's concurrency threads: the server a test runs
    /// in this process answers the program on those (two on this machine), and two tests each blocking one while their
    /// program waits for the server is a deadlock until the program times out.
    package static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (output: String, passed: Bool) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let running = Running(process: process, output: output)
        return await withCheckedContinuation { continuation in
            Thread {
                // Read before waiting: a program that writes more than the pipe holds would wait for us otherwise.
                let text = String(decoding: running.output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                running.process.waitUntilExit()
                continuation.resume(returning: (text, running.process.terminationStatus == 0))
            }.start()
        }
    }
}
