import Foundation
import GRDB
public import StorekeeperCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension SQLiteLedgerStore {
    /// Refuses a ledger path this process cannot use, in words an operator can act on, before SQLite is asked (whose
    /// own error is `SQLite error 8 … PRAGMA synchronous = FULL` for a read-only directory): the directory must be
    /// writable (SQLite writes its `-wal` and `-shm` files beside the ledger), the file readable and writable, and
    /// not a directory.
    public static func checkAccess(_ path: String) throws(StorageError) {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard !isDirectory.boolValue else {
                throw StorageError("the SQLite ledger \(path) is a directory: give the path of a file (e.g. \(path)/storekeeper.sqlite)")
            }
            guard access(path, R_OK | W_OK) == 0 else {
                throw StorageError("the SQLite ledger \(path) cannot be read and written by this process (\(String(cString: strerror(errno))))")
            }
        }
        if FileManager.default.fileExists(atPath: directory), access(directory, W_OK | X_OK) != 0 {
            throw StorageError(
                "the directory \(directory) of the SQLite ledger is not writable by this process (\(String(cString: strerror(errno)))): "
                    + "SQLite keeps its write-ahead log (-wal and -shm files) beside the ledger"
            )
        }
    }

    /// A SQLite failure in words, when it is one an operator can act on; nil otherwise.
    static func explain(_ error: any Error, path: String) -> String? {
        guard let error = error as? DatabaseError else { return nil }
        switch error.resultCode {
        case .SQLITE_FULL:
            return "the disk holding the SQLite ledger \(path) is full: nothing was written; free some space"
        case .SQLITE_READONLY:
            return "the SQLite ledger \(path) or its directory is read-only for this process (a read-only file system, or the file's owner)"
        case .SQLITE_NOTADB:
            return "\(path) is not a SQLite database (is --database the right file?)"
        case .SQLITE_CANTOPEN:
            return "the SQLite ledger \(path) cannot be opened (its directory missing or not writable?)"
        case .SQLITE_IOERR:
            return "the disk holding the SQLite ledger \(path) failed to read or write (\(error.message ?? "I/O error")); nothing was acknowledged"
        case .SQLITE_CORRUPT:
            return "the SQLite ledger \(path) is corrupt: restore it from a backup (storekeeper backup)"
        default:
            return nil
        }
    }
}
