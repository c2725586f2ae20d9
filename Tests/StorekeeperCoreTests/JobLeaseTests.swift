import Foundation
import Logging
import StorekeeperCore
import StorekeeperPostgres
import StorekeeperSQLite
import StorekeeperTesting
import Synchronization
import Testing

/// Scheduled jobs with several instances on one database: one runs the job at a time, another takes over when it dies.
@Suite("Job leases", .dropsTestDatabases)
struct JobLeaseTests {
    /// `count` stores on one database of `backend`: several instances of PostgreSQL, or several processes (a `serve`,
    /// a `recover`, a `reconcile --all`) on one SQLite file, whose leases live in the file.
    static func instances(_ count: Int, _ backend: Backend) async throws -> [any LedgerStore] {
        switch backend {
        case .sqlite:
            let path = TestFiles.directory.appendingPathComponent("ledger-\(UUID()).sqlite").path
            return try (0..<count).map { _ in try SQLiteLedgerStore(path: path) }
        case .postgres:
            let url = try await PostgresTestDatabase.create()
            var stores: [any LedgerStore] = []
            for _ in 0..<count { stores.append(try await PostgresLedgerStore.open(url)) }
            return stores
        }
    }

    @Test("a lease has one holder; it is renewed by its holder, taken when it lapses, free at once when given back", arguments: Backend.available)
    func leaseRules(backend: Backend) async throws {
        let stores = try await Self.instances(2, backend)
        // A lease far longer than a busy machine (the whole suite in parallel) takes between two calls.
        let a = JobLease(store: stores[0], job: "job", holder: "a", duration: .seconds(120))
        let b = JobLease(store: stores[1], job: "job", holder: "b", duration: .seconds(120))
        #expect(try await a.acquire())
        #expect(try await b.acquire() == false)
        #expect(try await a.acquire())
        // Another job's lease is another lease.
        #expect(try await JobLease(store: stores[1], job: "other job", holder: "b").acquire())
        await a.release()
        #expect(try await b.acquire(), "a gave it back")
        #expect(try await a.acquire() == false)
        // A lease that lapses (a second, not renewed) is taken.
        let short = JobLease(store: stores[0], job: "short job", holder: "a", duration: .seconds(1))
        #expect(try await short.acquire())
        try await Task.sleep(for: .milliseconds(1_300))
        #expect(try await JobLease(store: stores[1], job: "short job", holder: "b", duration: .seconds(120)).acquire(), "a's lease lapsed")
        #expect(try await short.acquire() == false)
    }

    @Test("a schedule stopped (its task cancelled, as at a graceful shutdown) gives its lease back at once", arguments: Backend.available)
    func stoppedScheduleGivesTheLeaseBack(backend: Backend) async throws {
        let stores = try await Self.instances(2, backend)
        let runs = Mutex(0)
        let schedule = LeasedSchedule(
            lease: JobLease(store: stores[0], job: "job", holder: "a", duration: .seconds(60)), interval: .seconds(3_600),
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        )
        let task = Task { await schedule.run { runs.withLock { $0 += 1 } } }
        let started = ContinuousClock.now
        while runs.withLock({ $0 }) == 0, ContinuousClock.now - started < .seconds(30) { try await Task.sleep(for: .milliseconds(20)) }
        let other = JobLease(store: stores[1], job: "job", holder: "b", duration: .seconds(60))
        #expect(try await other.acquire() == false, "a holds it")
        task.cancel()
        await task.value
        // The lease lasts 60 s: only its being given back lets another instance take it now.
        #expect(try await other.acquire(), "the lease was not given back")
        for store in stores { if let store = store as? PostgresLedgerStore { await store.close() } }
    }

    @Test(
        "three instances scheduling one job: it runs on one at a time; when that one dies, another takes over within the lease",
        arguments: Backend.available)
    func oneRunnerAndTakeover(backend: Backend) async throws {
        let stores = try await Self.instances(3, backend)
        let runs = Collected<(instance: Int, start: ContinuousClock.Instant, end: ContinuousClock.Instant)>()
        // Long enough that a starved holder still renews in time on a loaded machine (a lapse mid-run is the lease at
        // work, but would make the "never two runs at once" check below depend on the machine).
        let leaseDuration = Duration.seconds(10)
        var tasks: [Task<Void, Never>] = []
        for (index, store) in stores.enumerated() {
            let schedule = LeasedSchedule(
                lease: JobLease(store: store, job: "recovery", holder: "instance-\(index)", duration: leaseDuration),
                interval: .milliseconds(50), logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            )
            tasks.append(
                Task {
                    await schedule.run {
                        let start = ContinuousClock.now
                        try? await Task.sleep(for: .milliseconds(20))
                        runs.add((index, start, ContinuousClock.now))
                    }
                })
        }
        // Until the job has run a few times (a busy machine may take a while to start the schedules).
        let warmUp = ContinuousClock.now + .seconds(30)
        while runs.values.count < 3, ContinuousClock.now < warmUp { try await Task.sleep(for: .milliseconds(20)) }
        let first = runs.values
        #expect(first.count >= 3)
        // The instance running the job dies: it stops without giving the lease back (its database connection is
        // gone first). (The job may have changed hands before, if a starved holder could not renew in time: that is
        // the lease at work; what must never happen is two runs at once, checked at the end.)
        let dead = try #require(first.last?.instance)
        if let store = stores[dead] as? PostgresLedgerStore { await store.close() }
        let died = ContinuousClock.now
        tasks[dead].cancel()
        if backend == .sqlite {
            // SQLite's holder gives the lease back as it stops; take it again as a dead holder would have left it
            // (unless another instance was quicker, which is a takeover too).
            await tasks[dead].value
            _ = try await JobLease(store: stores[dead], job: "recovery", holder: "instance-\(dead)", duration: leaseDuration).acquire()
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, !runs.values.contains(where: { $0.instance != dead && $0.start > died }) {
            try await Task.sleep(for: .milliseconds(20))
        }
        let takeover = try #require(runs.values.first { $0.instance != dead && $0.start > died })
        // Within the lease and one poll (a third of it), with room for a machine stalled for a while.
        #expect(takeover.start - died < leaseDuration + leaseDuration / 3 + .seconds(10), "took over after \(takeover.start - died)")
        try await Task.sleep(for: .milliseconds(500))
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        // Never two runs at once, over the whole test.
        let all = runs.values.sorted { $0.start < $1.start }
        for (earlier, later) in zip(all, all.dropFirst()) {
            #expect(later.start >= earlier.end || later.instance == earlier.instance, "runs of \(earlier.instance) and \(later.instance) overlapped")
        }
        for store in stores { if let store = store as? PostgresLedgerStore { await store.close() } }
    }

    @Test(
        "a lease whose holder is a process of this machine that no longer runs is taken at once; one of another machine is waited out",
        arguments: Backend.available)
    func deadLocalHolder(backend: Backend) async throws {
        let stores = try await Self.instances(2, backend)
        // A process that ran and ended: its PID names no process now.
        let ended = try ChildProcess("/bin/true", [])
        await ended.wait()
        let parts = JobLease.instanceName.split(separator: "/")
        let deadHolder = "\(parts[0])/\(ended.processIdentifier)/deadbeef/\(parts[3])"
        #expect(try await JobLease(store: stores[0], job: "job", holder: deadHolder, duration: .seconds(600)).acquire())
        #expect(try await JobLease(store: stores[1], job: "job", duration: .seconds(600)).acquire(), "the dead holder's lease was taken at once")

        // A process that ended but is not reaped yet (a zombie: its parent, `sleep`, never waits) runs no more either.
        let parent = try ChildProcess("/bin/bash", ["-c", "true & echo $!; exec sleep 5"], output: .pipe)
        defer { parent.kill() }
        let zombie = try #require(
            Int32(String(decoding: parent.output?.availableData ?? Data(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        try await Task.sleep(for: .milliseconds(200))
        let zombieHolder = "\(parts[0])/\(zombie)/deadbeef/\(parts[3])"
        #expect(try await JobLease(store: stores[0], job: "zombie job", holder: zombieHolder, duration: .seconds(600)).acquire())
        #expect(
            try await JobLease(store: stores[1], job: "zombie job", duration: .seconds(600)).acquire(), "a zombie holder's lease was taken at once")

        let remote = "another-host/\(ended.processIdentifier)/deadbeef/\(parts[3])"
        #expect(try await JobLease(store: stores[0], job: "other", holder: remote, duration: .seconds(600)).acquire())
        #expect(
            try await JobLease(store: stores[1], job: "other", duration: .seconds(600)).acquire() == false,
            "another machine's holder is never judged by this one's PIDs")
        let alive = "\(parts[0])/1/deadbeef/\(parts[3])"  // PID 1 always runs
        #expect(try await JobLease(store: stores[0], job: "third", holder: alive, duration: .seconds(600)).acquire())
        #expect(try await JobLease(store: stores[1], job: "third", duration: .seconds(600)).acquire() == false, "a live process keeps its lease")
        for store in stores { if let store = store as? PostgresLedgerStore { await store.close() } }
    }
}
