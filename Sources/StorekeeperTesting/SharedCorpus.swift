package import Foundation

/// `../shared` beside the checkout (or `STOREKEEPER_SHARED_DIR`): Apple's roots and the conformance corpus the tests
/// read. A missing folder stops the run with a clear message, so a missing corpus never passes as "no samples".
package enum SharedCorpus {
    /// The `shared` folder.
    package static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["STOREKEEPER_SHARED_DIR"], !override.isEmpty {
            return URL(fileURLWithPath: override)
        }
        // Sources/StorekeeperTesting/SharedCorpus.swift → the package's folder → its parent.
        return URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("shared")
    }

    /// The real Apple-signed samples: `conformance/apple-signed`.
    package static var appleSigned: URL { directory.appendingPathComponent("conformance/apple-signed") }
    /// Apple's receipt, Xcode and offer fixtures, and real sandbox receipts (INDEX.md inside).
    package static var appleReceipts: URL { directory.appendingPathComponent("conformance/apple-receipts") }

    /// The names of the files in `folder`, or a stop with the message that says where the corpus was looked for.
    package static func files(in folder: URL) -> [String] {
        guard let files = try? FileManager.default.contentsOfDirectory(atPath: folder.path) else {
            fatalError("conformance corpus not found at \(folder.path); set STOREKEEPER_SHARED_DIR")
        }
        return files.sorted()
    }
}
