import AppStoreModels
import Foundation
import SwiftASN1
package import X509

/// A certificate file given by an operator (a trusted root): PEM or DER, read with what is wrong with it in words.
package enum CertificateFile {
    package enum Problem: Error, Sendable, Equatable {
        case missing
        case directory
        /// A device, a pipe or another kind of thing that is not a regular file.
        case notAFile
        /// This process may not read it: who owns it, and its mode (`LocalFile.owner(of:)`), when known.
        case unreadable(owner: String?)
        /// PEM, but no `CERTIFICATE` block in it (a key, say).
        case pemWithoutCertificate
        /// A `CERTIFICATE` block that is not a valid X.509 certificate.
        case invalidPEM
        /// Neither PEM nor DER X.509; its size in bytes.
        case notACertificate(bytes: Int)
    }

    /// The certificate in the file at `path`, or why there is none.
    package static func load(_ path: String) -> Result<Certificate, Problem> {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return .failure(.missing) }
        guard !isDirectory.boolValue else { return .failure(.directory) }
        guard LocalFile.isRegular(path) else { return .failure(.notAFile) }
        guard let data = FileManager.default.contents(atPath: path) else { return .failure(.unreadable(owner: LocalFile.owner(of: path))) }
        if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN") {
            guard text.contains("-----BEGIN CERTIFICATE-----") else { return .failure(.pemWithoutCertificate) }
            guard let certificate = try? Certificate(pemEncoded: text) else { return .failure(.invalidPEM) }
            return .success(certificate)
        }
        guard let certificate = try? Certificate(derEncoded: Array(data)) else { return .failure(.notACertificate(bytes: data.count)) }
        return .success(certificate)
    }

    /// The problem in words, naming the file as `shown`.
    package static func describe(_ problem: Problem, _ shown: String) -> String {
        switch problem {
        case .missing: return "\(shown) does not exist"
        case .directory: return "\(shown) is a directory"
        case .notAFile: return "\(shown) is not a regular file (a device or a pipe?)"
        case .unreadable(let owner): return "\(shown) cannot be read by this process\(owner.map { " (it is \($0))" } ?? "")"
        case .pemWithoutCertificate: return "\(shown) is PEM but holds no certificate (no BEGIN CERTIFICATE block; a key?)"
        case .invalidPEM: return "\(shown) holds a PEM block that is not a valid X.509 certificate"
        case .notACertificate(let bytes):
            return "\(shown) is not a certificate: neither PEM (a BEGIN CERTIFICATE block) nor DER X.509 (\(bytes) bytes)"
        }
    }
}
