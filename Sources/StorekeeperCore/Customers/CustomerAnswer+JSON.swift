import AppStoreModels
import Foundation
package import NIOCore

extension CustomerAnswer {
    /// The answer's JSON (what `GET /v1/customers/{id}` answers), written field by field: byte for byte what
    /// `AppStoreJSON.makeEncoder()` writes for the `Encodable` conformance (keys sorted by their UTF-8 bytes, dates as
    /// epoch milliseconds, absent optionals left out; `CustomerViewJSONTests` compares the two), without the
    /// encoder's machinery, a large part of the server's CPU on a cache miss (Benchmarks/History.md, "Entitlement
    /// reads").
    package func json() -> ByteBuffer {
        var out = JSONWriter()
        out.object { out in
            out.field("bundleId", bundleId)
            out.key("consumableBalance")
            out.object { out in
                for (productId, units) in consumableBalance.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
                    out.field(escaping: productId, units)
                }
            }
            out.field("customerId", customerId)
            out.key("entitlements")
            out.array(entitlements) { out, entitlement in
                out.object { out in
                    out.field("entitlement", entitlement.entitlement)
                    out.field("expiresDate", entitlement.expiresDate)
                    out.field("grantId", entitlement.grantId)
                    out.field("inBillingRetry", entitlement.inBillingRetry)
                    out.field("inGracePeriod", entitlement.inGracePeriod)
                    // A promotional grant's has no purchase fields (Entitlement's `encode(to:)`).
                    if !entitlement.isPromotional {
                        out.field("originalTransactionId", entitlement.originalTransactionId)
                        out.field("ownership", entitlement.ownership.rawValue)
                        out.field("productId", entitlement.productId)
                        out.field("productType", entitlement.productType.rawValue)
                    }
                    out.field("source", entitlement.source)
                    if !entitlement.isPromotional { out.field("transactionId", entitlement.transactionId) }
                    out.field("willRenew", entitlement.willRenew)
                }
            }
            out.field("environment", environment)
            out.key("nonConsumables")
            out.array(nonConsumables) { out, productId in out.string(productId) }
            out.key("subscriptions")
            out.array(subscriptions) { out, subscription in
                out.object { out in
                    out.field("autoRenew", subscription.autoRenew)
                    out.field("autoRenewProductId", subscription.autoRenewProductId)
                    out.field("expiresDate", subscription.expiresDate)
                    out.field("gracePeriodExpiresDate", subscription.gracePeriodExpiresDate)
                    out.field("isInBillingRetryPeriod", subscription.isInBillingRetryPeriod)
                    out.field("originalTransactionId", subscription.originalTransactionId)
                    out.field("ownership", subscription.ownership)
                    out.field("productId", subscription.productId)
                    out.field("status", subscription.status)
                    out.field("statusFromNotification", subscription.statusFromNotification)
                }
            }
        }
        return out.buffer
    }

    /// `json()` as text (an event's state).
    package var jsonText: String { String(buffer: json()) }
}

/// Compact JSON into a byte buffer, written as `JSONEncoder` writes it: strings escaped as it escapes them (`"`,
/// `\\`, `/`, and control characters), integers in decimal, `nil` fields left out. The caller writes an object's keys
/// in sorted order.
package struct JSONWriter {
    /// Room for a typical answer from the start: growing a buffer byte by byte reallocates it several times.
    private(set) var buffer: ByteBuffer
    private var afterValue = false

    /// `capacity`: room for a typical answer from the start (1 KiB), less for a small object.
    init(capacity: Int = 1_024) {
        buffer = ByteBufferAllocator().buffer(capacity: capacity)
    }

    mutating func object(_ body: (inout JSONWriter) -> Void) {
        open(UInt8(ascii: "{"))
        body(&self)
        close(UInt8(ascii: "}"))
    }

    mutating func array<Element>(_ elements: [Element], _ body: (inout JSONWriter, Element) -> Void) {
        open(UInt8(ascii: "["))
        for element in elements { body(&self, element) }
        close(UInt8(ascii: "]"))
    }

    /// A key of the format's own (a constant, which needs no escape): written as it is, without the scan a string
    /// from data needs.
    mutating func key(_ name: StaticString) {
        separate()
        buffer.writeInteger(UInt8(ascii: "\""))
        buffer.writeStaticString(name)
        buffer.writeStaticString("\":")
        afterValue = false
    }

    /// A key from data (a product ID, a key of a JSON object read back): escaped.
    mutating func key(escaping name: String) {
        string(name)
        buffer.writeInteger(UInt8(ascii: ":"))
        afterValue = false
    }

    mutating func field(_ name: StaticString, _ value: String?) {
        guard let value else { return }
        key(name)
        string(value)
    }

    mutating func field(_ name: StaticString, _ value: Int?) {
        guard let value else { return }
        key(name)
        integer(value)
    }

    /// A field whose key is data (a product ID): escaped.
    mutating func field(escaping name: String, _ value: Int) {
        key(escaping: name)
        integer(value)
    }

    private mutating func integer(_ value: Int) {
        buffer.writeString(String(value))
        afterValue = true
    }

    mutating func field(_ name: StaticString, _ value: Date?) {
        field(name, value.map { Int($0.epochMilliseconds) })
    }

    mutating func field(_ name: StaticString, _ value: Bool?) {
        guard let value else { return }
        key(name)
        buffer.writeStaticString(value ? "true" : "false")
        afterValue = true
    }

    mutating func string(_ value: String) {
        separate()
        buffer.writeInteger(UInt8(ascii: "\""))
        // Most strings need no escape: one scan of their UTF-8 and one copy.
        let plain = value.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            for byte in bytes where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/") {
                return false
            }
            buffer.writeBytes(UnsafeRawBufferPointer(bytes))
            return true
        }
        if plain == true {
            buffer.writeInteger(UInt8(ascii: "\""))
            afterValue = true
            return
        }
        var plainFrom = value.utf8.startIndex
        for index in value.utf8.indices {
            let byte = value.utf8[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/") else { continue }
            buffer.writeBytes(value.utf8[plainFrom..<index])
            plainFrom = value.utf8.index(after: index)
            switch byte {
            case UInt8(ascii: "\""): buffer.writeStaticString("\\\"")
            case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
            case UInt8(ascii: "/"): buffer.writeStaticString("\\/")
            case 0x08: buffer.writeStaticString("\\b")
            case 0x0C: buffer.writeStaticString("\\f")
            case 0x0A: buffer.writeStaticString("\\n")
            case 0x0D: buffer.writeStaticString("\\r")
            case 0x09: buffer.writeStaticString("\\t")
            default:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                buffer.writeStaticString("\\u00")
                buffer.writeInteger(hex[Int(byte >> 4)])
                buffer.writeInteger(hex[Int(byte & 0x0F)])
            }
        }
        buffer.writeBytes(value.utf8[plainFrom...])
        buffer.writeInteger(UInt8(ascii: "\""))
        afterValue = true
    }

    /// Writes JSON already encoded as the next value.
    mutating func rawValue(_ json: String) {
        separate()
        buffer.writeString(json)
        afterValue = true
    }

    private mutating func open(_ bracket: UInt8) {
        separate()
        buffer.writeInteger(bracket)
        afterValue = false
    }

    private mutating func close(_ bracket: UInt8) {
        buffer.writeInteger(bracket)
        afterValue = true
    }

    private mutating func separate() {
        if afterValue { buffer.writeInteger(UInt8(ascii: ",")) }
    }
}
