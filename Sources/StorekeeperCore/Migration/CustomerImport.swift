import AppStoreModels
package import Foundation
import Synchronization

/// A migration from another backend: a list of customers, each with one transaction ID of their Apple account (an
/// original transaction ID from the old database) or their app receipt, imported one by one with
/// ``AccountImporter`` — several at once, so that the App Store Server API client's rate limiter, not the round
/// trips, sets the pace. What `storekeeper import` and `POST /v1/admin/imports` run.
package enum CustomerImport {
    /// One line of the list.
    package struct Line: Sendable, Hashable {
        /// 1-based, as an editor shows it.
        package var number: Int
        package var customerId: String
        package var source: Source

        package init(number: Int, customerId: String, source: Source) {
            self.number = number
            self.customerId = customerId
            self.source = source
        }

        package enum Source: Sendable, Hashable {
            /// Digits: a transaction ID (any of the account's; the original one is usual).
            case transactionId(String)
            /// Anything else: a base64 app receipt.
            case receipt(String)
        }
    }

    /// What became of a line.
    package enum Outcome: String, Codable, Sendable, CaseIterable {
        /// Purchases newly linked to the customer, or records the ledger lacked.
        case imported
        /// Everything was in the ledger already, linked to this customer.
        case known
        /// Every purchase of the account belongs to another customer (the restore policy kept it there).
        case refused
        /// The line could not be imported: malformed, an invalid receipt, a transaction the App Store does not know.
        case failed
    }

    /// A line's result, as the journal keeps it and the report lists failures.
    package struct LineResult: Codable, Sendable, Hashable, Error {
        package var line: Int
        package var customerId: String
        package var outcome: Outcome
        /// For `refused` and `failed`: a stable code and what was wrong.
        package var code: String?
        package var message: String?

        package init(line: Int, customerId: String, outcome: Outcome, code: String? = nil, message: String? = nil) {
            self.line = line
            self.customerId = customerId
            self.outcome = outcome
            self.code = code
            self.message = message
        }
    }

    /// Why a run stopped before its end (the App Store or the ledger failing, not one line's fault); the lines done
    /// stay done.
    package struct Stopped: Error, Sendable, CustomStringConvertible {
        package var line: Int
        package var reason: String
        package var description: String { "stopped at line \(line): \(reason)" }
    }

    /// A CSV field without its enclosing double quotes, a doubled quote in it read as one; any other field as it is.
    static func unquoted(_ field: String) -> String {
        guard field.count >= 2, field.hasPrefix("\""), field.hasSuffix("\"") else { return field }
        return String(field.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"").trimmingCharacters(in: .whitespaces)
    }

    /// Reads the list: `customerId,transactionId` or `customerId,<base64 receipt>` per line; blank lines and lines
    /// starting with `#` skipped, and a first line naming the columns (`customerId,…`). A malformed line is a failed
    /// result naming what is wrong, never a silent skip.
    package static func parse(_ text: String, isCustomerId: (String) -> Bool) -> (lines: [Line], malformed: [LineResult]) {
        var lines: [Line] = []
        var malformed: [LineResult] = []
        var number = 0
        // Any line break: "\r\n" (a spreadsheet's export) is one Character, and so one break, as "\n" and "\r" are.
        for row in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            number += 1
            let trimmed = row.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            // A spreadsheet's export may quote its fields (`"c1","2000000000000001"`, a quote in one doubled): neither
            // field can hold a comma, so splitting first is safe.
            let fields = trimmed.split(separator: ",", omittingEmptySubsequences: false).map {
                Self.unquoted($0.trimmingCharacters(in: .whitespaces))
            }
            if number == 1, let first = fields.first?.lowercased(), ["customerid", "customer_id", "customer"].contains(first) { continue }
            let shownId = UntrustedText.escaped(fields.first ?? "", limit: 64)
            guard fields.count == 2 else {
                malformed.append(
                    LineResult(
                        line: number, customerId: shownId, outcome: .failed, code: "malformed-line",
                        message: "\(fields.count) fields, not 2 (customerId,transactionId or customerId,receipt)"))
                continue
            }
            guard isCustomerId(fields[0]) else {
                malformed.append(
                    LineResult(
                        line: number, customerId: shownId, outcome: .failed, code: "invalid-customer-id",
                        message: "customer IDs are 1-128 ASCII letters, digits and -_.@:"))
                continue
            }
            let value = fields[1]
            if !value.isEmpty, value.utf8.count <= 20, value.utf8.allSatisfy({ (48...57).contains($0) }) {
                lines.append(Line(number: number, customerId: fields[0], source: .transactionId(value)))
            } else if !value.isEmpty, value.utf8.allSatisfy({ (48...57).contains($0) }) {
                // All digits, and too long for a transaction ID (a base64 receipt is never only digits).
                malformed.append(
                    LineResult(
                        line: number, customerId: fields[0], outcome: .failed, code: "malformed-line",
                        message: "the second field has \(value.utf8.count) digits: a transaction ID has at most 20"))
            } else if value.utf8.count > 20 {
                lines.append(Line(number: number, customerId: fields[0], source: .receipt(value)))
            } else {
                malformed.append(
                    LineResult(
                        line: number, customerId: fields[0], outcome: .failed, code: "malformed-line",
                        message: "the second field is neither a transaction ID (digits) nor a base64 receipt"))
            }
        }
        return (lines, malformed)
    }

    /// How far a run has got.
    package struct Progress: Codable, Sendable, Hashable {
        package var total: Int
        /// Lines done in this run and, when resumed, in earlier runs (``skipped``).
        package var done: Int
        package var skipped: Int
        package var counts: [String: Int]
        package var requests: Int
        /// The first 100 refused or failed lines.
        package var problems: [LineResult]
        package var startedAt: Date
        package var finishedAt: Date?
        /// Why the run stopped early, if it did.
        package var stopped: String?
    }

    /// The state of one run, shared by its workers and whoever follows it.
    package final class Run: Sendable {
        private let state: Mutex<Progress>
        static let problemsKept = 100

        package init(total: Int, now: Date = Date()) {
            state = Mutex(
                Progress(
                    total: total, done: 0, skipped: 0, counts: Dictionary(uniqueKeysWithValues: Outcome.allCases.map { ($0.rawValue, 0) }),
                    requests: 0, problems: [], startedAt: now))
        }

        package var progress: Progress { state.withLock { $0 } }

        package func record(_ result: LineResult, requests: Int = 0, skipped: Bool = false) {
            state.withLock { progress in
                progress.done += 1
                if skipped { progress.skipped += 1 }
                progress.requests += requests
                progress.counts[result.outcome.rawValue, default: 0] += 1
                if result.outcome == .refused || result.outcome == .failed, progress.problems.count < Self.problemsKept {
                    progress.problems.append(result)
                }
            }
        }

        package func finish(stopped: String?, now: Date = Date()) {
            state.withLock {
                $0.finishedAt = now
                $0.stopped = stopped
            }
        }

        /// Imports `lines` (those not in `alreadyDone`), `concurrency` at a time. `resolve` gives a line's importer and
        /// transaction ID, or its failed result (a receipt that does not verify); `done` is told each result as it is
        /// known (to journal it). Throws ``Stopped`` when the App Store or the ledger fails (not a line's fault): lines
        /// not done are left for the next run. Cancellation stops it between lines.
        package func run(
            _ lines: [Line], alreadyDone: [Int: LineResult] = [:], concurrency: Int = 8,
            resolve: @escaping @Sendable (Line) async -> Swift.Result<(AccountImporter, String), LineResult>,
            done: @escaping @Sendable (LineResult) async throws -> Void
        ) async throws(Stopped) {
            for line in lines { if let result = alreadyDone[line.number] { record(result, skipped: true) } }
            let pending = lines.filter { alreadyDone[$0.number] == nil }
            final class Shared: Sendable {
                let next = Mutex(0)
                let stop = Mutex<Stopped?>(nil)
            }
            let shared = Shared()
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<max(1, min(concurrency, pending.count)) {
                    group.addTask {
                        while !Task.isCancelled, shared.stop.withLock({ $0 == nil }) {
                            let index = shared.next.withLock { value -> Int in
                                defer { value += 1 }
                                return value
                            }
                            guard index < pending.count else { return }
                            let line = pending[index]
                            do {
                                let (result, requests) = try await Self.importLine(line, resolve: resolve)
                                try await done(result)
                                self.record(result, requests: requests)
                            } catch let error as Stopped {
                                shared.stop.withLock { if $0 == nil { $0 = error } }
                            } catch {
                                shared.stop.withLock {
                                    if $0 == nil { $0 = Stopped(line: line.number, reason: "the journal could not be written: \(error)") }
                                }
                            }
                        }
                    }
                }
            }
            if let stopped = shared.stop.withLock({ $0 }) { throw stopped }
            if Task.isCancelled { throw Stopped(line: 0, reason: "cancelled") }
        }

        static func importLine(
            _ line: Line, resolve: @Sendable (Line) async -> Swift.Result<(AccountImporter, String), LineResult>
        ) async throws(Stopped) -> (LineResult, Int) {
            let importer: AccountImporter
            let transactionId: String
            switch await resolve(line) {
            case .failure(let failed): return (failed, 0)
            case .success(let resolved): (importer, transactionId) = resolved
            }
            do {
                let report = try await importer.importCustomer(line.customerId, transactionId: transactionId)
                let result: LineResult
                if report.linked.isEmpty, let refusal = report.refused.first {
                    result = LineResult(
                        line: line.number, customerId: line.customerId, outcome: .refused, code: refusal.code, message: refusal.message)
                } else if report.newlyLinked > 0 || report.recordsChanged > 0 {
                    result = LineResult(line: line.number, customerId: line.customerId, outcome: .imported)
                } else {
                    result = LineResult(line: line.number, customerId: line.customerId, outcome: .known)
                }
                return (result, report.requests)
            } catch let failure {
                if failure.isUnknownTransaction {
                    return (
                        LineResult(
                            line: line.number, customerId: line.customerId, outcome: .failed, code: "unknown-transaction",
                            message: "the App Store does not know transaction \(transactionId) in \(importer.app)"), 1
                    )
                }
                throw Stopped(line: line.number, reason: "\(failure)")
            }
        }
    }
}
