import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import AppStoreSimulator
import ArgumentParser
import Foundation

/// A JWS given on the command line as the text itself, `@FILE`, or `-` for standard input.
enum InputArgument {
    /// Reads the input, trimming surrounding white space. Reads at most one byte past the verifier's 1 MiB limit,
    /// so a huge file is refused without being loaded. Input that is not UTF-8 text is refused with `notText` (what
    /// the command reads: a JWS by default).
    static func read(
        _ argument: String, notText: CLIError = CLIError(code: VerificationError.Code.malformedJWS.rawValue, message: "input is not UTF-8 text")
    ) throws -> String {
        let data = try bytes(argument, limit: 1 << 20, tooLarge: VerificationError.Code.inputTooLarge.rawValue)
        guard let text = String(bytes: data, encoding: .utf8) else { throw notText }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The input's bytes (the text itself, `@FILE` or `-`), at most `limit`: one byte more is read, so a huge file
    /// is refused (with the code `tooLarge`) without being loaded.
    static func bytes(_ argument: String, limit: Int, tooLarge: String) throws -> [UInt8] {
        let data: Data
        if argument == "-" {
            data = FileHandle.standardInput.readData(ofLength: limit + 1)
        } else if argument.hasPrefix("@") {
            let path = String(argument.dropFirst())
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                throw CLIError(code: "unreadable-input", message: "\(UntrustedText.quoted(path, limit: 256)) is a directory, not a file")
            }
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw CLIError(code: "unreadable-input", message: "cannot open \(UntrustedText.quoted(path, limit: 256))")
            }
            defer { try? handle.close() }
            data = handle.readData(ofLength: limit + 1)
        } else {
            data = Data(argument.utf8)
        }
        guard data.count <= limit else {
            throw CLIError(code: tooLarge, message: "input is over \(limit) bytes (\(limit >> 20) MiB)")
        }
        return [UInt8](data)
    }
}

/// A failure the CLI reports as `error: <code>: <message>` with exit status 1.
struct CLIError: Error, CustomStringConvertible {
    var code: String
    var message: String
    var description: String { "\(code): \(message)" }

    /// A value of the command line that the command refused (`invalid-option`, `invalid-argument`, an app or
    /// endpoint the configuration does not have: `unknown-app`, `unknown-endpoint`, or a request a running simulator
    /// refused as malformed or naming what it does not have: `simulator-400`, `simulator-404`): a usage mistake, exit
    /// status 64 like ArgumentParser's own; every other failure is 1.
    var isUsage: Bool {
        !notUsage && ["invalid-option", "invalid-argument", "unknown-app", "unknown-endpoint", "simulator-400", "simulator-404"].contains(code)
    }
    /// A code that is a usage mistake elsewhere is not one here (a scenario's step refused by a running simulator).
    var notUsage = false
}

extension ExitCode {
    /// The status a command's failure ends with: 64 for a usage mistake (``CLIError/isUsage``), 1 for anything else.
    static func failure(for error: any Error) -> ExitCode {
        (error as? CLIError)?.isUsage == true ? .validationFailure : .failure
    }
}

/// Runs a command's body; a `VerificationError`, `SigningError` or `CLIError` is printed as
/// `error: <code>: <message>` on standard error and ends the command with exit status 1, or 64 (`EX_USAGE`, as
/// ArgumentParser ends a malformed command line) for an option or argument the command refuses
/// (``CLIError/isUsage``).
func reportingFailures(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as VerificationError {
        try fail(error.description)
    } catch let error as SigningError {
        try fail(error.description)
    } catch let error as CLIError {
        try fail(error.description, status: ExitCode.failure(for: error))
    } catch let error as SimulatorError {
        try fail(error.description)
    } catch let error as AppStoreServerAPIError {
        // Refused before anything was sent (a malformed ID, a value out of range): a usage mistake.
        try fail(
            "\(error.errorCode.map { "api-\($0)" } ?? error.kind.rawValue): \(error.detail)",
            status: error.kind == .invalidRequest ? .validationFailure : .failure)
    }
}

private func fail(_ text: String, status: ExitCode = .failure) throws -> Never {
    reportError("\(text)")
    throw status
}
