import AppStoreModels
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive lock on a file for as long as this process lives (or until ``release()``), so that one thing has
/// one writer: a SQLite ledger one `serve`, a simulator directory one simulator. The kernel drops the lock when the
/// process ends however it ends (a crash, `kill -9`), so a lock is never stale. The lock file names its holder (PID,
/// command, since when), and the refusal of a second process says who holds it.
final class ExclusiveLock: Sendable {
    let path: String
    private let descriptor: Mutex<Int32>
    /// A lock on the same file however it is named (``init(sameFileAs:)``), given back with this one.
    private let companion = Mutex<ExclusiveLock?>(nil)

    /// Who holds a lock this process could not take.
    struct Held: Error, CustomStringConvertible {
        var path: String
        var holder: String
        var description: String { "\(holder) holds \(path)" }
    }

    /// Takes the lock on `path` (created if missing, mode 0644) without waiting, writing `purpose` (e.g.
    /// `storekeeper serve`) into it with this process's ID; throws ``Held`` naming the holder when another process
    /// has it, or a ``CLIError`` when the file cannot be made.
    init(path: String, purpose: String) throws {
        self.path = path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            let code = errno
            let reason = String(cString: strerror(code))
            // Most often a lock file left by a run as another user: whose it is, and what to do.
            let advice =
                code == EACCES || code == EPERM
                ? "\(LocalFile.owner(of: path).map { " (\($0))" } ?? ""): run storekeeper as the user who owns the ledger; "
                    + "the lock file holds no data and may be deleted while no storekeeper runs on the ledger" : ""
            throw CLIError(code: "cannot-lock", message: "cannot open the lock file \(path): \(reason)\(advice)")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = Self.holder(descriptor)
            close(descriptor)
            if code == EWOULDBLOCK { throw Held(path: path, holder: holder ?? "another process (it has not written its name yet)") }
            throw CLIError(code: "cannot-lock", message: "cannot lock \(path): \(String(cString: strerror(code)))")
        }
        let text = "PID \(getpid()) (\(purpose)) since \(Date().formatted(.iso8601))\n"
        _ = ftruncate(descriptor, 0)
        _ = text.withCString { pwrite(descriptor, $0, strlen($0), 0) }
        self.descriptor = Mutex(descriptor)
    }

    /// Takes a lock on `file` itself (it must exist), never writing to it: a lock of its inode, so the same file
    /// reached through a hard link is the same lock. Throws ``Held`` when another process has it. `flock` locks are
    /// apart from the POSIX locks SQLite takes; the descriptor stays open until ``release()``, which comes after the
    /// file's database connections are closed (closing a descriptor drops the process's POSIX locks on the file).
    init(sameFileAs file: String) throws {
        path = file
        let descriptor = open(file, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw CLIError(code: "cannot-lock", message: "cannot open \(file) to lock it: \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(descriptor)
            if code == EWOULDBLOCK { throw Held(path: file, holder: "another process, through another name for the same file (a hard link)") }
            throw CLIError(code: "cannot-lock", message: "cannot lock \(file): \(String(cString: strerror(code)))")
        }
        self.descriptor = Mutex(descriptor)
    }

    /// Holds `lock` too, until this one is given back.
    func holding(_ lock: ExclusiveLock) {
        companion.withLock { $0 = lock }
    }

    /// What the lock file says of its holder.
    private static func holder(_ descriptor: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    /// Gives the lock back (also done when the process ends).
    func release() {
        companion.withLock { companion in
            companion?.release()
            companion = nil
        }
        descriptor.withLock { descriptor in
            guard descriptor >= 0 else { return }
            _ = flock(descriptor, LOCK_UN)
            close(descriptor)
            descriptor = -1
        }
    }

    deinit { release() }
}
