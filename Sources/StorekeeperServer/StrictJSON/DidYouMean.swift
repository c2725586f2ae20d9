/// The known name nearest to a mistyped one, for "did you mean …?" in errors about configuration keys and query
/// parameters: the same but for case, or within a few edits.
enum DidYouMean {
    static func nearest(to name: String, among known: some Collection<String>) -> String? {
        if let same = known.first(where: { $0.lowercased() == name.lowercased() }) { return same }
        let scored = known.map { ($0, editDistance(Array($0.lowercased()), Array(name.lowercased()))) }
        guard let best = scored.min(by: { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }) else { return nil }
        return best.1 <= max(2, min(best.0.count, name.count) / 3) ? best.0 : nil
    }

    /// Levenshtein distance.
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1]
            for (j, y) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }
}
