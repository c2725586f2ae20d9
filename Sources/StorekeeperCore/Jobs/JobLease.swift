import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A scheduled job's lease in the ledger's database, so that with several instances on one database the job runs on
/// one of them at a time, and another takes over within the lease's duration when that one dies (its lease runs out;
/// a graceful shutdown gives it back at once). The database's clock decides expiry (PostgreSQL's), so the instances'
/// clocks need not agree.
package struct JobLease: Sendable {
    package let store: any LedgerStore
    /// The job, e.g. `recovery com.example.app Production`.
    package let job: String
    /// This instance (``instanceName``).
    package let holder: String
    /// How long a lease lasts without renewal: the longest a dead holder keeps the job from the others.
    package let duration: Duration

    package init(store: any LedgerStore, job: String, holder: String = JobLease.instanceName, duration: Duration = .seconds(60)) {
        self.store = store
        self.job = job
        self.holder = holder
        self.duration = duration
    }

    /// This process, as lease holders and logs name it: host, process ID, a random suffix (a restarted process on
    /// the same host is another holder) and the process's scope on this host (`processScope`). The host name is the
    /// kernel's (`gethostname`), never a DNS look-up.
    package static let instanceName: String = {
        "\(hostName)/\(ProcessInfo.processInfo.processIdentifier)/\(UUID().uuidString.prefix(8).lowercased())/\(processScope)"
    }()

    static let hostName: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        return gethostname(&buffer, buffer.count) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "host"
    }()

    /// Where this process's ID means this process: the boot and the PID namespace (Linux), so that a holder whose
    /// process ID is looked up is looked up on the same machine, since the same boot, in the same namespace (two
    /// containers may share a host name, never a PID namespace).
    static let processScope: String = {
        #if os(Linux)
        let boot = (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8))?.prefix(8) ?? "boot"
        let namespace =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid"))?
            .filter(\.isNumber) ?? "ns"
        return "\(boot)-\(namespace)"
        #else
        return "local"
        #endif
    }()

    /// Whether `holder` names a process of this host and scope that no longer runs (killed, crashed, interrupted
    /// before it could give its lease back): its lease need not be waited out. Holders named otherwise (another
    /// host, an earlier version's name) are never judged dead.
    static func isDeadLocalProcess(_ holder: String) -> Bool {
        let parts = holder.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == hostName, parts[3] == processScope, let pid = Int32(parts[1]),
            pid != ProcessInfo.processInfo.processIdentifier, pid > 0
        else { return false }
        if kill(pid, 0) != 0 { return errno == ESRCH }
        #if os(Linux)
        // A process that has ended but that its parent has not yet reaped (a zombie) still answers `kill`: it runs no
        // more, so its lease is free (the third field of /proc/PID/stat, after the command's parenthesis, is its state).
        if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") {
            return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
        }
        #endif
        return false
    }

    /// Takes the lease, or renews it when this holder has it; whether this holder has it now. A lease held by a
    /// process of this host that no longer runs is taken at once.
    package func acquire() async throws(StorageError) -> Bool {
        if try await store.acquireLease(job, holder: holder, duration: duration) { return true }
        guard let current = try await store.leaseHolder(job), Self.isDeadLocalProcess(current) else { return false }
        try await store.releaseLease(job, holder: current)
        return try await store.acquireLease(job, holder: holder, duration: duration)
    }

    /// Who holds the lease now (for a refusal's message), or nil.
    package func holderNow() async -> String? {
        try? await store.leaseHolder(job)
    }

    /// Gives the lease back, if this holder has it (not from a cancelled task: the store would refuse it).
    package func release() async {
        try? await store.releaseLease(job, holder: holder)
    }

    /// The lease was lost while `body` ran (not renewed in time, or taken): `body` was cancelled.
    package struct Lost: Error {}

    /// Runs `body` while renewing the lease every third of its duration; a renewal that fails or finds the lease
    /// taken cancels `body` and throws ``Lost``. Call with the lease held.
    package func whileHolding<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                // Ends quietly when cancelled, so that what `body` returns or throws (a report of what it did) is what
                // the caller gets.
                while (try? await Task.sleep(for: duration / 3)) != nil {
                    guard (try? await acquire()) == true else { throw Lost() }
                }
                return nil
            }
            defer { group.cancelAll() }
            while let result = try await group.next() {
                if let result { return result }
            }
            throw CancellationError()
        }
    }
}
