package import Foundation
import HeapModule

/// A record a ``RecordTable`` holds: the keys the table indexes it under, and the time it next falls due.
package protocol TableRecord: Codable, Sendable {
    /// The keys the table finds this record by without scanning (its customer, its family, its order ID, …).
    var indexKeys: [RecordIndexKey] { get }
    /// When the engine must next act on this record (a renewal, a grace or billing-retry expiry), if ever.
    var dueDate: Date? { get }
}

extension TableRecord {
    package var indexKeys: [RecordIndexKey] { [] }
    package var dueDate: Date? { nil }
}

/// A record that belongs to one customer for life: indexed by its customer.
package protocol CustomerOwnedRecord: TableRecord {
    var customerId: String { get }
}

extension CustomerOwnedRecord {
    package var indexKeys: [RecordIndexKey] { [.customer(customerId)] }
}

/// A secondary key of a ``RecordTable``: what it names (a customer, a family, …) and its value.
package struct RecordIndexKey: Hashable, Sendable {
    package var kind: String
    package var value: String

    package init(kind: String, value: String) {
        self.kind = kind
        self.value = value
    }

    /// The customer a record belongs to.
    package static func customer(_ id: String) -> RecordIndexKey { .init(kind: "customer", value: id) }
}

/// Records by ID, changed in place, with what a simulator needs to be fast whatever its history:
///
/// - every write through the subscript keeps a secondary index (``TableRecord/indexKeys``), so a customer's (or a
///   family's) records are found without scanning everyone's;
/// - records that fall due are kept in a heap by due date, so the next renewal is found in O(log n);
/// - the IDs written since the last `takeChangedIds()` are kept, so a save writes only those records;
/// - while `isJournaling`, each write keeps the record it replaced, so a failed action is undone by
///   `rollBack(to:)` in O(changes) instead of keeping a copy of the table.
///
/// Encoded exactly like a dictionary of the records; decoding rebuilds the indexes.
package struct RecordTable<Record: TableRecord>: Codable, Sendable {
    /// Every record by ID.
    package private(set) var byId: [String: Record] = [:]
    private var idsByKey: [RecordIndexKey: Set<String>] = [:]
    /// Due dates, earliest first. Entries are hints: one whose record now falls due at another time (or never) is
    /// stale and skipped, so a write only adds an entry.
    private var due = Heap<DueEntry>()
    private var changed: Set<String> = []
    private var undo: [(id: String, previous: Record?)] = []
    /// Whether writes are journaled for ``rollBack(to:)``.
    var isJournaling = false

    struct DueEntry: Comparable {
        var date: Date
        var id: String
        static func < (lhs: DueEntry, rhs: DueEntry) -> Bool { (lhs.date, lhs.id) < (rhs.date, rhs.id) }
    }

    package init() {}

    package subscript(id: String) -> Record? {
        get { byId[id] }
        set { write(id, newValue) }
    }

    private mutating func write(_ id: String, _ newValue: Record?) {
        let previous: Record?
        if let newValue {
            previous = byId.updateValue(newValue, forKey: id)
        } else {
            previous = byId.removeValue(forKey: id)
        }
        if isJournaling { undo.append((id, previous)) }
        changed.insert(id)
        let oldKeys = previous?.indexKeys ?? []
        let newKeys = newValue?.indexKeys ?? []
        if oldKeys != newKeys {
            for key in oldKeys where !newKeys.contains(key) {
                idsByKey[key]?.remove(id)
                if idsByKey[key]?.isEmpty == true { idsByKey[key] = nil }
            }
            for key in newKeys where !oldKeys.contains(key) { idsByKey[key, default: []].insert(id) }
        }
        if let date = newValue?.dueDate, date != previous?.dueDate {
            due.insert(DueEntry(date: date, id: id))
            if due.count > 2 * byId.count + 64 { compactDueDates() }
        }
    }

    /// Every record, in no particular order.
    package var values: Dictionary<String, Record>.Values { byId.values }

    /// Every ID, in no particular order.
    package var keys: Dictionary<String, Record>.Keys { byId.keys }

    package var count: Int { byId.count }

    /// A customer's records, by ID.
    package func records(of customerId: String) -> [Record] {
        records(withKey: .customer(customerId))
    }

    /// The records indexed under `key`, by ID.
    package func records(withKey key: RecordIndexKey) -> [Record] {
        (idsByKey[key] ?? []).sorted().compactMap { byId[$0] }
    }

    /// The IDs of the records indexed under `key`, in no particular order.
    package func ids(withKey key: RecordIndexKey) -> Set<String> {
        idsByKey[key] ?? []
    }

    // MARK: - Due dates

    /// The record due first (ties: the smallest ID) if it is due at or before `limit`. Drops the stale entries it
    /// meets on the way.
    mutating func firstDue(atOrBefore limit: Date) -> (date: Date, id: String)? {
        while let entry = due.min {
            guard byId[entry.id]?.dueDate == entry.date else {
                _ = due.popMin()
                continue
            }
            return entry.date <= limit ? (entry.date, entry.id) : nil
        }
        return nil
    }

    private mutating func compactDueDates() {
        due = Heap(byId.compactMap { id, record in record.dueDate.map { DueEntry(date: $0, id: id) } })
    }

    // MARK: - Changes and undo

    /// The IDs written since the last call (each maps to the record now, or to none if removed).
    mutating func takeChangedIds() -> Set<String> {
        defer { changed = [] }
        return changed
    }

    /// Marks every record as changed (to write a whole table, e.g. when importing).
    mutating func markAllChanged() {
        changed = Set(byId.keys)
    }

    /// Where the journal is now, to roll back to.
    var undoMark: Int { undo.count }

    /// Undoes every write journaled since `mark`, newest first.
    mutating func rollBack(to mark: Int) {
        let journaling = isJournaling
        isJournaling = false
        while undo.count > mark {
            let (id, previous) = undo.removeLast()
            write(id, previous)
        }
        isJournaling = journaling
    }

    /// Forgets the journal (the outermost action succeeded).
    mutating func clearJournal() {
        undo.removeAll(keepingCapacity: true)
    }

    // MARK: - Coding

    package init(from decoder: any Decoder) throws {
        for (id, record) in try [String: Record](from: decoder) { self[id] = record }
        changed = []
    }

    package func encode(to encoder: any Encoder) throws {
        try byId.encode(to: encoder)
    }
}

extension RecordTable: Equatable where Record: Equatable {
    /// Equal when they hold the same records (the indexes follow from them).
    package static func == (lhs: RecordTable, rhs: RecordTable) -> Bool { lhs.byId == rhs.byId }
}
