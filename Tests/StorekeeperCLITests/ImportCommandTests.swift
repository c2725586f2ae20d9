import AppStoreModels
import AppStoreSimulator
import Foundation
import Glibc
import StorekeeperCore
import StorekeeperSQLite
import StorekeeperTesting
import Testing

@Suite("storekeeper import")
struct ImportCommandTests {
    /// The CSV of `missed`'s customers: even ones by original transaction ID, odd ones by the receipt the simulator
    /// issues them.
    static func csv(_ missed: MissedNotifications) async throws -> String {
        try await missed.simulator.read { (engine) throws(SimulatorError) in
            var rows = ["customerId,transactionOrReceipt"]
            for truth in engine.groundTruth() {
                let index = Int(truth.customerId.dropFirst()) ?? 0
                if index % 2 == 0 {
                    let original = engine.transactions(customerId: truth.customerId, bundleId: TestAppStore.bundleID)[0].info.originalTransactionId
                    rows.append("\(truth.customerId),\(original)")
                } else {
                    rows.append(
                        "\(truth.customerId),\(Data(try engine.appReceipt(customerId: truth.customerId, bundleId: nil)).base64EncodedString())")
                }
            }
            return rows.joined(separator: "\n") + "\n"
        }
    }

    /// The customers linked in the ledger, and each one's purchases.
    static func linked(_ database: String, _ customers: [String]) async throws -> [String: Int] {
        let store = try SQLiteLedgerStore(path: database)
        var found: [String: Int] = [:]
        for customer in customers {
            let ledger = try await store.ledger(for: customer, bundleId: TestAppStore.bundleID, environment: .sandbox)
            let count = ledger.explicitLinks.values.filter { $0 == customer }.count
            if count > 0 { found[customer] = count }
        }
        return found
    }

    @Test(
        "a CSV of transaction IDs and receipts imports every customer with the simulator's purchases; bad lines are named; a second run skips what is done"
    )
    func imports() async throws {
        let directory = try CLI.temporaryDirectory("import")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(10, in: directory)
        let file = directory.appendingPathComponent("customers.csv").path
        let good = try await Self.csv(missed)
        try (good + "bad id!,123\nc99,1,2\nc98,99999999999\nc97,not a receipt at all, really no\n").write(
            toFile: file, atomically: true, encoding: .utf8)
        try await missed.serve { _ in
            _ = try SQLiteLedgerStore(path: missed.database)
            let first = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            #expect(first.status == 3, "refused or failed lines: \(first.stderr)")
            let report = try CLI.json(first.stdout)
            let counts = report["counts"] as? [String: Int] ?? [:]
            #expect(counts["imported"] == 10 && counts["failed"] == 4 && counts["known"] == 0, "\(first.stdout)")
            let problems = (report["problems"] as? [[String: Any]]) ?? []
            #expect(
                Set(problems.compactMap { $0["code"] as? String }) == ["invalid-customer-id", "malformed-line", "unknown-transaction"], "\(problems)")
            #expect(problems.contains { $0["line"] as? Int == 14 && $0["code"] as? String == "unknown-transaction" }, "\(problems)")
            #expect(first.stderr.contains("customers/s"), "the progress line: \(first.stderr)")
            let customers = (0..<10).map { "c\($0)" }
            #expect(try await Self.linked(missed.database, customers).count == 10)

            // Again: every line already done, nothing asked of the App Store.
            let second = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            let again = try CLI.json(second.stdout)
            #expect(again["skipped"] as? Int == 14 && again["requests"] as? Int == 0, "\(second.stdout)")

            // A line torn by a crash is closed before the next result is written after it. (A longer file, so a
            // fresh journal; then a torn tail on it.)
            try (good + "bad id!,123\nc99,1,2\nc98,99999999999\nc97,not a receipt at all, really no\nc96,not digits\n").write(
                toFile: file, atomically: true, encoding: .utf8)
            try FileManager.default.removeItem(atPath: file + ".journal")
            let third = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            #expect(third.status == 3, "\(third.stderr)")
            let torn = try FileHandle(forWritingTo: URL(fileURLWithPath: file + ".journal"))
            try torn.seekToEnd()
            try torn.write(contentsOf: Data(#"{"line":3,"custo"#.utf8))
            try torn.close()
            let fourth = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            #expect(try CLI.json(fourth.stdout)["skipped"] as? Int == 15, "\(fourth.stdout)")
            let rows = try String(contentsOfFile: file + ".journal", encoding: .utf8).split(separator: "\n")
            #expect(rows.filter { $0.hasPrefix(#"{"line":3,"custo"#) && !$0.hasSuffix("}") }.count == 1, "the torn line stays alone on its line")
            #expect(rows.allSatisfy { $0.hasPrefix("{") }, "\(rows.suffix(3))")

            // The journal belongs to the file: a changed file is refused rather than half-skipped.
            try (good + "c5,123\n").write(toFile: file, atomically: true, encoding: .utf8)
            let changed = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            #expect(changed.status == 1 && changed.stderr.contains("journal-of-another-file"), "\(changed.stderr)")
            // A fresh journal: the same customers are known now.
            try FileManager.default.removeItem(atPath: file + ".journal")
            try good.write(toFile: file, atomically: true, encoding: .utf8)
            let known = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            #expect(known.status == 0, "\(known.stderr)")
            #expect((try CLI.json(known.stdout)["counts"] as? [String: Int])?["known"] == 10, "\(known.stdout)")
        }
        let missing = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file + ".nope"])
        #expect(missing.status == 1 && missing.stderr.contains("unreadable-file"), "\(missing.stderr)")
        // Standard input redirected from the file (`--file /dev/stdin < customers.csv`) has no directory for the journal:
        // it must be named (nothing is written in /dev).
        let errors = directory.appendingPathComponent("stdin.err")
        let fromStdin = try ChildProcess(
            CLI.binary.path, ["import", "--config", missed.config, "--database", missed.database, "--file", "/dev/stdin"],
            input: .file(URL(fileURLWithPath: file)), error: .file(errors))
        #expect(await fromStdin.finish(within: 60).status == 1)
        let said = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
        #expect(said.contains("journal-needed") && said.contains("give --journal PATH"), "\(said)")
        #expect(!FileManager.default.fileExists(atPath: "/dev/stdin.journal"))
    }

    @Test("an import SIGKILLed half-way and started again imports every customer once")
    func killedAndResumed() async throws {
        let directory = try CLI.temporaryDirectory("import-kill")
        defer { try? FileManager.default.removeItem(at: directory) }
        let missed = try await MissedNotifications.make(30, in: directory)
        let file = directory.appendingPathComponent("customers.csv").path
        try await Self.csv(missed).write(toFile: file, atomically: true, encoding: .utf8)
        try await missed.serve { _ in
            _ = try SQLiteLedgerStore(path: missed.database)
            let process = try ChildProcess(
                CLI.binary.path, ["import", "--config", missed.config, "--database", missed.database, "--file", file, "--concurrency", "2"])
            let journal = file + ".journal"
            func journaled() -> Int { ((try? String(contentsOfFile: journal, encoding: .utf8)) ?? "").split(separator: "\n").count - 1 }
            let deadline = ContinuousClock.now + .seconds(60)
            while journaled() < 6, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            process.kill()
            let before = journaled()
            #expect(before >= 6 && before < 30, "killed after \(before) lines")

            let resumed = try await CLI.runDetached(["import", "--config", missed.config, "--database", missed.database, "--file", file])
            #expect(resumed.status == 0, "\(resumed.stderr)")
            let report = try CLI.json(resumed.stdout)
            #expect(report["skipped"] as? Int == before && report["done"] as? Int == 30, "\(resumed.stdout)")
            let counts = report["counts"] as? [String: Int] ?? [:]
            #expect((counts["imported"] ?? 0) + (counts["known"] ?? 0) == 30, "\(counts)")
            #expect(journaled() == 30, "each line journaled once")
            let linked = try await Self.linked(missed.database, (0..<30).map { "c\($0)" })
            #expect(linked.count == 30 && linked.values.allSatisfy { $0 == 1 }, "\(linked)")
        }
    }

    @Test("the list's lines may end in LF, CRLF or CR; a header and comments are skipped; line numbers are the editor's")
    func lineEndings() {
        let (lines, malformed) = CustomerImport.parse(
            "customerId,transactionId\r\nc1,2000000000000001\r\n# a comment\r\nc2,2000000000000002\rc3,x y\nc4,2000000000000004\r\n",
            isCustomerId: { !$0.isEmpty && !$0.contains(" ") })
        #expect(lines.map(\.customerId) == ["c1", "c2", "c4"])
        #expect(lines.map(\.number) == [2, 4, 6])
        #expect(malformed.map(\.line) == [5] && malformed.first?.code == "malformed-line")
    }

    @Test("a spreadsheet's quoted fields are read without their quotes, a header too; a quote left inside a field is refused with it")
    func quotedFields() {
        let (lines, malformed) = CustomerImport.parse(
            "\"customer_id\",\"transaction_id\"\n\"c1\",\"2000000000000001\"\n c2 , \"2000000000000002\" \n\"c\"\"3\",2000000000000003\n\"c4,2000000000000004\n",
            isCustomerId: { !$0.isEmpty && $0.allSatisfy { $0.isLetter || $0.isNumber } })
        #expect(lines.map(\.customerId) == ["c1", "c2"])
        #expect(lines.map(\.number) == [2, 3])
        #expect(malformed.map(\.line) == [4, 5] && malformed.allSatisfy { $0.code == "invalid-customer-id" }, "\(malformed)")
    }

    @Test("a transaction ID of more than 20 digits is said to be too long, not read as a receipt")
    func overlongTransactionId() {
        let (lines, malformed) = CustomerImport.parse(
            "c1,20000000000000000000000001\nc2,\nc3,2000000000000003\n", isCustomerId: { !$0.isEmpty })
        #expect(lines.map(\.customerId) == ["c3"])
        #expect(malformed.map(\.line) == [1, 2] && malformed.allSatisfy { $0.code == "malformed-line" }, "\(malformed)")
        #expect(malformed.first?.message == "the second field has 26 digits: a transaction ID has at most 20", "\(malformed)")
        #expect(malformed.last?.message?.contains("neither a transaction ID") == true, "\(malformed)")
    }
}
