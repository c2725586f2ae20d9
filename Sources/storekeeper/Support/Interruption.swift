import ArgumentParser
import Foundation
import Synchronization
import UnixSignals

/// Ctrl-C (SIGINT) and SIGTERM for the long commands (`recover`, `reconcile`): the first stops the work (its task
/// is cancelled, so that it gives its job lease back and says what it had done), a second ends the process at once.
final class Interruption: Sendable {
    private let received = Mutex<UnixSignal?>(nil)

    /// The signal that stopped the work, if one did.
    var signal: UnixSignal? { received.withLock { $0 } }

    /// The exit status a shell gives a command ended by `signal`: 128 plus its number (130 for Ctrl-C).
    var exitCode: ExitCode? {
        signal.map { ExitCode(Int32(128) + ($0 == .sigint ? SIGINT : SIGTERM)) }
    }

    /// Runs `body` until it ends; on SIGINT or SIGTERM, cancels it and waits for what it returns or throws.
    func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let work = Task { try await body() }
        let watcher = Task { [self] in
            for await signal in await UnixSignalsSequence(trapping: .sigint, .sigterm) {
                let first = self.received.withLock { current in
                    defer { if current == nil { current = signal } }
                    return current == nil
                }
                guard first else {
                    try? FileHandle.standardError.write(contentsOf: Data("\nstopped at once\n".utf8))
                    exit(128 + (signal == .sigint ? SIGINT : SIGTERM))
                }
                try? FileHandle.standardError.write(
                    contentsOf:
                        Data("\nstopping: giving the job's lease back and printing what was done (again to quit at once)\n".utf8))
                work.cancel()
            }
        }
        defer { watcher.cancel() }
        return try await work.value
    }
}
