package import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A program a test runs as a child process (the `storekeeper` binary, Python's reference libraries, a shell), started
/// with `posix_spawn` so that it inherits nothing of the test process but what it is given.
///
/// Why not Foundation's `Process`:
/// - On Linux it closes the child's inherited descriptors by listing `/proc/self/fd`, and reads each entry's whole
///   256-byte name even when the directory buffer ends sooner. With about 1,400 descriptors open (the suite's first
///   seconds, when every suite opens its stores and servers at once) the last entry sits at the end of the buffer, and
///   the read crossed into unmapped memory: CI's test process crashed in `Process.run()`.
/// - Its default is to hand the child the test process's own output. A child that outlives a crashed test process
///   (a server, a receiver) then holds `swift test`'s pipe open, and `swift test` waits for it until CI's time runs
///   out instead of reporting the crash.
///
/// Here every descriptor from 3 up is closed in the child by glibc (`posix_spawn_file_actions_addclosefrom_np`), the
/// standard streams go where the caller says (`/dev/null` unless told otherwise), the child gets default signal
/// handlers and an empty signal mask, and an instance that is released while its child still runs kills and reaps it.
/// The child stays in the test process's process group: a Ctrl-C or a CI job's timeout that stops the tests stops it
/// too.
package final class ChildProcess: Sendable {
    /// Where one of the child's standard streams goes.
    package enum Stream: Sendable {
        /// `/dev/null`.
        case discard
        /// A file: standard input reads it; an output writes it from its start (created if missing, emptied if not).
        case file(URL)
        /// A pipe whose other end this process holds: ``input``, ``output`` or ``error``.
        case pipe
        /// For standard error only: the same place as standard output.
        case sameAsOutput
    }

    /// How the child ended.
    package enum Termination: Equatable, Sendable, CustomStringConvertible {
        case exited(Int32)
        case signalled(Int32)

        /// The exit status, or the signal's number (as Foundation's `Process.terminationStatus` gives it).
        package var status: Int32 {
            switch self {
            case .exited(let code): code
            case .signalled(let signal): signal
            }
        }

        package var description: String {
            switch self {
            case .exited(let code): "exited with status \(code)"
            case .signalled(let signal): "killed by signal \(signal)"
            }
        }
    }

    /// What went wrong starting a child.
    package struct SpawnError: Error, CustomStringConvertible {
        package var description: String
    }

    package let processIdentifier: pid_t
    /// The write end of the child's standard input, when it is `.pipe`.
    package let input: FileHandle?
    /// The read end of the child's standard output, when it is `.pipe`.
    package let output: FileHandle?
    /// The read end of the child's standard error, when it is `.pipe`.
    package let error: FileHandle?
    private let state = Mutex<Termination?>(nil)

    /// Starts `executable` (a path) with `arguments`, this process's environment with `environment` added (secrets go
    /// there, never on the command line, which `ps` shows), in `directory` if given.
    package init(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:], directory: URL? = nil,
        input: Stream = .discard, output: Stream = .discard, error: Stream = .discard
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Descriptors this process opened for the child only: closed here once it has started.
        var forChild: [Int32] = []
        defer { for descriptor in forChild { close(descriptor) } }
        var ours: [Int32: FileHandle] = [:]

        func route(_ stream: Stream, to target: Int32) throws {
            switch stream {
            case .discard:
                let descriptor = open("/dev/null", (target == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC)
                guard descriptor >= 0 else { throw SpawnError(description: "cannot open /dev/null: \(Self.errorText())") }
                forChild.append(descriptor)
                posix_spawn_file_actions_adddup2(&actions, descriptor, target)
            case .file(let url):
                let descriptor = open(url.path, target == 0 ? O_RDONLY | O_CLOEXEC : O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
                guard descriptor >= 0 else { throw SpawnError(description: "cannot open \(url.path): \(Self.errorText())") }
                forChild.append(descriptor)
                posix_spawn_file_actions_adddup2(&actions, descriptor, target)
            case .pipe:
                var ends: [Int32] = [-1, -1]
                guard pipe(&ends) == 0 else { throw SpawnError(description: "cannot make a pipe: \(Self.errorText())") }
                // Not inherited by another test's child started meanwhile (`pipe2` is not in Swift's Glibc module).
                _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
                _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
                let (childEnd, ourEnd) = target == 0 ? (ends[0], ends[1]) : (ends[1], ends[0])
                forChild.append(childEnd)
                ours[target] = FileHandle(fileDescriptor: ourEnd, closeOnDealloc: true)
                posix_spawn_file_actions_adddup2(&actions, childEnd, target)
            case .sameAsOutput:
                precondition(target == 2, "only standard error can go where standard output goes")
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
            }
        }
        do {
            try route(input, to: 0)
            try route(output, to: 1)
            try route(error, to: 2)
        } catch {
            for handle in ours.values { try? handle.close() }
            throw error
        }
        if let directory {
            guard let changeDirectory = Self.addChangeDirectory else {
                throw SpawnError(description: "this glibc cannot start a child in another directory (posix_spawn_file_actions_addchdir_np)")
            }
            _ = changeDirectory(&actions, directory.path)
        }
        if let closeFrom = Self.addCloseFrom {
            _ = closeFrom(&actions, 3)
        } else {
            // An older glibc: close each descriptor that could be open (slower, same effect).
            for descriptor in 3..<max(Int32(3), Int32(getdtablesize())) { posix_spawn_file_actions_addclose(&actions, descriptor) }
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var all = sigset_t()
        sigfillset(&all)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let environmentLines = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0.key)=\($0.value)" }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environmentLines.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            for handle in ours.values { try? handle.close() }
            throw SpawnError(description: "cannot start \(executable): \(String(cString: strerror(result)))")
        }
        processIdentifier = pid
        self.input = ours[0]
        self.output = ours[1]
        self.error = ours[2]
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later) and `posix_spawn_file_actions_addchdir_np`
    /// (2.29), which Swift's Glibc module does not declare (they are GNU extensions).
    private static let addCloseFrom = glibc(
        "posix_spawn_file_actions_addclosefrom_np", as: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    private static let addChangeDirectory = glibc(
        "posix_spawn_file_actions_addchdir_np",
        as: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32).self)

    private static func glibc<Function>(_ name: String, as type: Function.Type) -> Function? {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(symbol, to: type)
    }

    private static func errorText() -> String { String(cString: strerror(errno)) }

    /// How it ended, or nil while it runs (reaps it once it has ended).
    package var termination: Termination? {
        state.withLock { termination in
            if termination == nil {
                var status: Int32 = 0
                let reaped = waitpid(processIdentifier, &status, WNOHANG)
                if reaped == processIdentifier {
                    // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import (they are macros).
                    termination = status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signalled(status & 0x7f)
                } else if reaped == -1, errno == ECHILD {
                    // Reaped by someone else (nothing in the tests does): it has ended, how is unknown.
                    termination = .signalled(0)
                }
            }
            return termination
        }
    }

    package var isRunning: Bool { termination == nil }

    /// Sends `signal` to the child (nothing once it has been reaped: its PID may belong to another process by then).
    package func signal(_ signal: Int32) {
        state.withLock { termination in
            if termination == nil { _ = Glibc.kill(processIdentifier, signal) }
        }
    }

    /// Waits for it to end, blocking the calling thread: for a thread of the test's own, never Swift's concurrency
    /// threads (two on this machine, which a server in the same test needs).
    @discardableResult
    package func waitUntilExit() -> Termination {
        while true {
            if let termination { return termination }
            usleep(2_000)
        }
    }

    /// Waits for it to end without blocking a thread.
    @discardableResult
    package func wait() async -> Termination {
        while true {
            if let termination { return termination }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Waits up to `seconds` for it to end, then kills it (SIGKILL); how it ended.
    @discardableResult
    package func finish(within seconds: Double) async -> Termination {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        signal(SIGKILL)
        return await wait()
    }

    /// Kills it (SIGKILL) and reaps it.
    package func kill() {
        signal(SIGKILL)
        waitUntilExit()
    }

    deinit {
        // A child nobody waits for any more is killed, never left running (or a zombie) after its test.
        if isRunning { kill() }
    }
}

extension ChildProcess {
    /// Runs a program to its end on a thread of its own (waiting never blocks Swift's concurrency threads); its
    /// standard output and error, read together so that neither pipe fills while the other is read, and how it ended.
    package static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:], directory: URL? = nil, input: Data? = nil,
        mergingError: Bool = false
    ) async throws -> (termination: Termination, output: Data, error: Data) {
        let child = try ChildProcess(
            executable, arguments, environment: environment, directory: directory, input: input == nil ? .discard : .pipe, output: .pipe,
            error: mergingError ? .sameAsOutput : .pipe)
        return await withCheckedContinuation { continuation in
            Thread {
                let errorText = Collected<Data>()
                let errorRead = DispatchSemaphore(value: 0)
                if let error = child.error {
                    Thread {
                        errorText.add(error.readDataToEndOfFile())
                        errorRead.signal()
                    }.start()
                } else {
                    errorRead.signal()
                }
                if let input, let handle = child.input {
                    // Written on its own thread too: a child that answers before it has read everything would
                    // otherwise wait for us to read while we wait for it to read.
                    Thread {
                        try? handle.write(contentsOf: input)
                        try? handle.close()
                    }.start()
                }
                let output = child.output?.readDataToEndOfFile() ?? Data()
                errorRead.wait()
                let termination = child.waitUntilExit()
                continuation.resume(returning: (termination, output, errorText.values.first ?? Data()))
            }.start()
        }
    }
}
