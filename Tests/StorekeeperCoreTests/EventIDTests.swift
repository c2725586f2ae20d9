import AppStoreModels
import Foundation
import StorekeeperCore
import StorekeeperTesting
import Testing

@Suite("Outgoing events: sortable unique event IDs")
struct EventIDTests {
    @Test("an event's timestamp is its occurredAt to the millisecond (the date formatter alone put most a millisecond early)")
    func timestampMatchesOccurredAt() {
        for (milliseconds, text) in [
            (Int64(1_795_709_490_577), "2026-11-26T16:11:30.577Z"), (1_795_709_490_000, "2026-11-26T16:11:30.000Z"),
            (1_795_709_490_009, "2026-11-26T16:11:30.009Z"),
        ] {
            #expect(LedgerEvent.timestamp(Date(epochMilliseconds: milliseconds)) == text)
        }
        var mismatched = 0
        for milliseconds in stride(from: Int64(1_795_709_490_000), to: 1_795_709_492_000, by: 1)
        where !LedgerEvent.timestamp(Date(epochMilliseconds: milliseconds)).hasSuffix(String(format: ".%03dZ", Int(milliseconds % 1_000))) {
            mismatched += 1
        }
        #expect(mismatched == 0)
    }

    @Test("an ID reads back from its text, keeps its time, and sorts as text in the order IDs were made")
    func textAndOrder() {
        let clock = TestClock(Date(timeIntervalSince1970: 1_780_000_000.123))
        let generator = EventIDGenerator(now: { clock.now })
        var made: [EventID] = []
        for step in 0..<2_000 {
            // Several IDs per millisecond, a clock that stands still, and one that steps back a second.
            if step % 7 == 0 { clock.advance(by: 0.001) }
            if step == 1_000 { clock.advance(by: -1) }
            made.append(generator.next())
        }
        #expect(Set(made).count == made.count)
        #expect(made == made.sorted(), "made in order, sorted in order")
        #expect(made.map(\.description) == made.map(\.description).sorted(), "sorted as text too")
        for id in made {
            #expect(id.description.count == 30 && id.description.hasPrefix("evt_"))
            #expect(EventID(id.description) == id && EventID(id.description.lowercased()) == id)
        }
        #expect(abs(made[0].date.timeIntervalSince1970 - 1_780_000_000.124) < 0.000_5)
    }

    @Test("IDs made at once on many tasks and by two generators (two instances) never repeat")
    func uniqueness() async {
        let one = EventIDGenerator()
        let two = EventIDGenerator()
        let ids = await withTaskGroup(of: [EventID].self) { group in
            for task in 0..<8 {
                group.addTask { (0..<2_000).map { _ in (task.isMultiple(of: 2) ? one : two).next() } }
            }
            var all: [EventID] = []
            for await part in group { all += part }
            return all
        }
        #expect(ids.count == 16_000 && Set(ids).count == 16_000)
    }

    @Test(
        "anything but evt_ and 26 base32 characters is not an ID",
        arguments: [
            "", "evt_", "01JDXA7Q3V1G5W8E2M4K6N9P0R", "evt_01JDXA7Q3V1G5W8E2M4K6N9P0", "evt_01JDXA7Q3V1G5W8E2M4K6N9P0RR",
            "evt_01JDXA7Q3V1G5W8E2M4K6N9P0U", "evt_81JDXA7Q3V1G5W8E2M4K6N9P0R", "msg_01JDXA7Q3V1G5W8E2M4K6N9P0R",
        ])
    func invalid(text: String) {
        #expect(EventID(text) == nil)
    }
}
