import Foundation

/// A file on this machine named on the command line or in a configuration, looked at before it is used, so that a
/// device, a pipe or another user's file is said in words.
package enum LocalFile {
    /// Whether `path` is a regular file, a symbolic link followed: not a directory, a device or a pipe (which have no
    /// end to read to).
    package static func isRegular(_ path: String) -> Bool {
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        return (try? FileManager.default.attributesOfItem(atPath: target)[.type] as? FileAttributeType) == .typeRegular
    }

    /// Who owns the file at `path` and its mode (`owned by uid 0, mode 644`), for errors that say a process may not
    /// use it; `nil` when it cannot be looked at.
    package static func owner(of path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let owner = (attributes[.ownerAccountID] as? NSNumber)?.intValue, let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue
        else { return nil }
        let octal = String(mode & 0o7777, radix: 8)
        return "owned by uid \(owner), mode \(String(repeating: "0", count: max(0, 3 - octal.count)) + octal)"
    }
}
