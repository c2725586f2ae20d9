import Foundation
import Glibc
import StorekeeperTesting
import Testing

/// The tests' way of running programs: nothing of the test process leaks into a child, and a child never outlives
/// its owner.
@Suite("ChildProcess: how the tests run programs")
struct ChildProcessTests {
    @Test("with 1,500 descriptors open (more than the suite's busiest second) a child starts and inherits none of them")
    func inheritsNoDescriptor() async throws {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        let count = min(1_500, Int(limit.rlim_cur) / 2)
        let opened = (0..<count).map { _ in open("/dev/null", O_RDONLY) }
        defer { for descriptor in opened { close(descriptor) } }
        #expect(opened.allSatisfy { $0 >= 0 })
        // Descriptors that are not close-on-exec, as Foundation's pipes are not: still not inherited.
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { for descriptor in ends { close(descriptor) } }

        let result = try await ChildProcess.run("/bin/sh", ["-c", "ls /proc/$$/fd"])
        let listed = String(decoding: result.output, as: UTF8.self).split(separator: "\n").compactMap { Int($0) }.sorted()
        #expect(result.termination == .exited(0))
        #expect(listed == [0, 1, 2], "the shell's descriptors: \(listed)")
    }

    @Test("input, output and error go where they are told; the exit status and a killing signal are told apart")
    func streamsAndEndings() async throws {
        let echoed = try await ChildProcess.run("/bin/sh", ["-c", "cat; echo to-error >&2; exit 3"], input: Data("to-output".utf8))
        #expect(echoed.termination == .exited(3) && echoed.termination.status == 3)
        #expect(String(decoding: echoed.output, as: UTF8.self) == "to-output")
        #expect(String(decoding: echoed.error, as: UTF8.self) == "to-error\n")

        let merged = try await ChildProcess.run("/bin/sh", ["-c", "echo one; echo two >&2"], mergingError: true)
        #expect(String(decoding: merged.output, as: UTF8.self) == "one\ntwo\n" && merged.error.isEmpty)

        let directory = try CLI.temporaryDirectory("child-process")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("out.txt")
        let written = try ChildProcess(
            "/bin/sh", ["-c", "pwd; echo \"$CHILD_SECRET\" >&2"], environment: ["CHILD_SECRET": "by-environment"], directory: directory,
            output: .file(file), error: .sameAsOutput)
        #expect(await written.wait() == .exited(0))
        #expect(try String(contentsOf: file, encoding: .utf8) == "\(directory.resolvingSymlinksInPath().path)\nby-environment\n")

        let sleeper = try ChildProcess("/bin/sleep", ["30"])
        #expect(sleeper.isRunning)
        sleeper.signal(SIGTERM)
        #expect(await sleeper.wait() == .signalled(SIGTERM))
        #expect(!sleeper.isRunning)

        // Missing programs are refused at once, with the path named.
        #expect {
            try ChildProcess("/nonexistent/program", [])
        } throws: { error in
            "\(error)".contains("/nonexistent/program")
        }
    }

    @Test("a child whose owner lets go of it is killed and reaped, not left running after its test")
    func releasedChildIsKilled() async throws {
        let pid: pid_t
        do {
            let child = try ChildProcess("/bin/sleep", ["30"])
            pid = child.processIdentifier
            withExtendedLifetime(child) { #expect(kill(pid, 0) == 0) }
        }
        // Killed and reaped: no such process any more (not even a zombie).
        #expect(kill(pid, 0) == -1 && errno == ESRCH)
    }
}
