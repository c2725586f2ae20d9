package import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the tests' files go: one directory per test process (`storekeeper-tests-PID` in the system's temporary
/// directory), removed when the process exits. A process that died before it could remove its own (a crash, a kill)
/// leaves it behind; the next test process removes every such directory whose process is gone. Ledgers, servers'
/// folders and configurations made by a run of the suite (about 45 MB) no longer pile up in `/tmp`.
package enum TestFiles {
    /// The directory, made on first use with `/tmp`'s permissions (every user may make files in it: some tests run a
    /// command as another user).
    package static let directory: URL = {
        let base = FileManager.default.temporaryDirectory
        removeAbandoned(in: base)
        let directory = base.appendingPathComponent("\(prefix)\(getpid())", isDirectory: true)
        // A directory of an earlier process that had the same PID.
        try? FileManager.default.removeItem(at: directory)
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        chmod(directory.path, 0o1777)
        atexit { TestFiles.removeDirectory() }
        return directory
    }()

    /// A path in ``directory``: `name` joined to it.
    package static func path(_ name: String) -> URL {
        directory.appendingPathComponent(name)
    }

    static let prefix = "storekeeper-tests-"

    private static func removeDirectory() {
        try? FileManager.default.removeItem(at: directory)
    }

    /// Removes the directories of test processes that no longer run.
    private static func removeAbandoned(in base: URL) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: base.path)) ?? []
        for name in names where name.hasPrefix(prefix) {
            guard let pid = pid_t(name.dropFirst(prefix.count)), pid != getpid() else { continue }
            if kill(pid, 0) != 0, errno == ESRCH {
                try? FileManager.default.removeItem(at: base.appendingPathComponent(name, isDirectory: true))
            }
        }
    }
}
