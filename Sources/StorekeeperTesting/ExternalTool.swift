package import Foundation

/// A program from outside the package that a test runs (Python's reference libraries, schemathesis, a browser), found
/// on the `PATH`: whether it is installed, and its run.
package enum ExternalTool {
    /// Whether `arguments` (a command and its arguments) runs and exits 0, its output discarded: `["python3", "-c",
    /// "import playwright"]`.
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

    /// Runs `arguments` to the end with `environment` added to this process's (secrets go there, never on the command
    /// line, which `ps` shows); its output and error output together, and whether it exited 0.
    package static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (output: String, passed: Bool) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        // Read before waiting: a program that writes more than the pipe holds would wait for us otherwise.
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (text, process.terminationStatus == 0)
    }
}
