public import HashTreeCollections

/// A record that belongs to one customer for life.
public protocol CustomerOwnedRecord: Codable, Sendable {
    var customerId: String { get }
}

/// Records by ID in a persistent hash trie (a snapshot costs O(1), a change after it O(log n)), with each
/// customer's record IDs indexed by every write through the subscript, so a customer's records are found without
/// scanning everyone's. Encoded exactly like a dictionary of the records; the index is rebuilt on decoding.
public struct RecordTable<Record: CustomerOwnedRecord>: Codable, Sendable {
    /// Every record by ID.
    public private(set) var byId: TreeDictionary<String, Record> = [:]
    private var idsByCustomer: TreeDictionary<String, Set<String>> = [:]

    public init() {}

    public subscript(id: String) -> Record? {
        get { byId[id] }
        set {
            let previous = byId[id]?.customerId
            byId[id] = newValue
            let current = newValue?.customerId
            guard previous != current else { return }
            if let previous {
                idsByCustomer[previous]?.remove(id)
                if idsByCustomer[previous]?.isEmpty == true { idsByCustomer[previous] = nil }
            }
            if let current { idsByCustomer[current, default: []].insert(id) }
        }
    }

    /// Every record, in no particular order.
    public var values: TreeDictionary<String, Record>.Values { byId.values }

    public var count: Int { byId.count }

    /// A customer's records, by ID.
    public func records(of customerId: String) -> [Record] {
        (idsByCustomer[customerId] ?? []).sorted().compactMap { byId[$0] }
    }

    public init(from decoder: any Decoder) throws {
        for (id, record) in try TreeDictionary<String, Record>(from: decoder) { self[id] = record }
    }

    public func encode(to encoder: any Encoder) throws {
        try byId.encode(to: encoder)
    }
}

extension RecordTable: Equatable where Record: Equatable {
    /// Equal when they hold the same records (the index follows from them).
    public static func == (lhs: RecordTable, rhs: RecordTable) -> Bool { lhs.byId == rhs.byId }
}

extension TransactionRecord: CustomerOwnedRecord {}
extension SubscriptionRecord: CustomerOwnedRecord {}
