import Foundation
import StorekeeperTesting
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: record table")
struct RecordTableTests {
    struct Note: CustomerOwnedRecord, Equatable {
        var customerId: String
        var text: String
    }

    @Test("each customer's records follow every insert, change, move and removal")
    func index() {
        var table = RecordTable<Note>()
        table["1"] = Note(customerId: "alice", text: "a")
        table["2"] = Note(customerId: "alice", text: "b")
        table["3"] = Note(customerId: "bob", text: "c")
        #expect(table.records(of: "alice").map(\.text) == ["a", "b"])
        table["2"]?.text = "b2"
        #expect(table.records(of: "alice").map(\.text) == ["a", "b2"])
        table["1"] = Note(customerId: "bob", text: "a moved")
        #expect(table.records(of: "alice").map(\.text) == ["b2"])
        #expect(table.records(of: "bob").map(\.text) == ["a moved", "c"])
        table["2"] = nil
        #expect(table.records(of: "alice").isEmpty)
        #expect(table.count == 2 && table.records(of: "nobody").isEmpty)
    }

    @Test("encoded exactly like a dictionary; decoding rebuilds the index")
    func coding() throws {
        var table = RecordTable<Note>()
        table["1"] = Note(customerId: "alice", text: "a")
        table["2"] = Note(customerId: "bob", text: "b")
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let dictionary = ["1": Note(customerId: "alice", text: "a"), "2": Note(customerId: "bob", text: "b")]
        #expect(try encoder.encode(table) == encoder.encode(dictionary))
        let decoded = try JSONDecoder().decode(RecordTable<Note>.self, from: encoder.encode(dictionary))
        #expect(decoded == table)
        #expect(decoded.records(of: "bob").map(\.text) == ["b"])
    }

    @Test("a snapshot is unaffected by later changes")
    func snapshots() {
        var table = RecordTable<Note>()
        table["1"] = Note(customerId: "alice", text: "a")
        let snapshot = table
        table["1"] = Note(customerId: "bob", text: "moved")
        table["2"] = Note(customerId: "alice", text: "new")
        #expect(snapshot.records(of: "alice").map(\.text) == ["a"])
        #expect(snapshot.records(of: "bob").isEmpty && snapshot.count == 1)
    }
}
