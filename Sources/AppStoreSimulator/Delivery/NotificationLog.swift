import Foundation

/// Every notification the simulator recorded, oldest first, with what makes the per-action work independent of
/// history: positions by UUID and by test-notification token, the set of notifications still awaiting an attempt,
/// the positions written since the last save, and a journal to undo a failed action's appends and updates.
///
/// A random-access collection of ``NotificationRecord`` (position 0 is the first notification ever recorded);
/// encoded as an array.
package struct NotificationLog: RandomAccessCollection, Codable, Sendable {
    private var records: [NotificationRecord] = []
    private var positionsByUUID: [String: Int] = [:]
    private var positionsByTestToken: [String: Int] = [:]
    /// Positions whose `nextAttemptAt` is set: not delivered yet, not given up.
    private(set) var awaitingAttempt: Set<Int> = []
    private var changed: Set<Int> = []
    /// The record each journaled write replaced; `nil` for an append.
    private var undo: [(position: Int, previous: NotificationRecord?)] = []
    /// Whether writes are journaled for ``rollBack(to:)``.
    var isJournaling = false

    package init() {}

    package var startIndex: Int { 0 }
    package var endIndex: Int { records.count }
    package subscript(position: Int) -> NotificationRecord { records[position] }

    /// The position of the notification with this UUID.
    package func position(of notificationUUID: String) -> Int? { positionsByUUID[notificationUUID] }

    /// The notification requested with Request a Test Notification under this token.
    package func testNotification(token: String) -> NotificationRecord? {
        positionsByTestToken[token].map { records[$0] }
    }

    /// Records a new notification at the end.
    mutating func append(_ record: NotificationRecord) {
        let position = records.count
        records.append(record)
        if isJournaling { undo.append((position, nil)) }
        changed.insert(position)
        index(record, at: position)
    }

    /// Replaces the notification at `position` (its UUID and token stay).
    mutating func update(at position: Int, _ record: NotificationRecord) {
        let previous = records[position]
        records[position] = record
        if isJournaling { undo.append((position, previous)) }
        changed.insert(position)
        index(record, at: position)
    }

    private mutating func index(_ record: NotificationRecord, at position: Int) {
        positionsByUUID[record.notificationUUID] = position
        if let token = record.testNotificationToken { positionsByTestToken[token] = position }
        if record.nextAttemptAt != nil {
            awaitingAttempt.insert(position)
        } else {
            awaitingAttempt.remove(position)
        }
    }

    /// The notifications whose next attempt is due at `now` or earlier, oldest first.
    func due(at now: Date) -> [NotificationRecord] {
        awaitingAttempt.filter { records[$0].nextAttemptAt! <= now }.sorted().map { records[$0] }
    }

    /// The earliest next attempt after `now`, if any.
    func nextAttempt(after now: Date) -> Date? {
        awaitingAttempt.lazy.compactMap { self.records[$0].nextAttemptAt }.filter { $0 > now }.min()
    }

    // MARK: - Changes and undo

    /// The positions written since the last call.
    mutating func takeChangedPositions() -> Set<Int> {
        defer { changed = [] }
        return changed
    }

    /// Marks every notification as changed (to write them all, e.g. when importing).
    mutating func markAllChanged() {
        changed = Set(records.indices)
    }

    var undoMark: Int { undo.count }

    /// Undoes every append and update journaled since `mark`, newest first.
    mutating func rollBack(to mark: Int) {
        while undo.count > mark {
            let (position, previous) = undo.removeLast()
            let current = records[position]
            if let previous {
                records[position] = previous
                index(previous, at: position)
            } else {
                records.removeLast()
                positionsByUUID[current.notificationUUID] = nil
                if let token = current.testNotificationToken { positionsByTestToken[token] = nil }
                awaitingAttempt.remove(position)
                changed.remove(position)
            }
        }
    }

    mutating func clearJournal() {
        undo.removeAll(keepingCapacity: true)
    }

    // MARK: - Coding

    package init(from decoder: any Decoder) throws {
        for record in try [NotificationRecord](from: decoder) { append(record) }
        changed = []
    }

    package func encode(to encoder: any Encoder) throws {
        try records.encode(to: encoder)
    }
}

extension NotificationLog: Equatable {
    package static func == (lhs: NotificationLog, rhs: NotificationLog) -> Bool { lhs.records == rhs.records }
}
