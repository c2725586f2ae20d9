import AppStoreReceipts
import Crypto
import Foundation
import SwiftASN1
import X509

/// `storekeeper bench receipts`: app receipts parsed and verified per second on one core (chain checks remembered,
/// validity judged every time), next to one raw RSA verification of the same signature in the same run, so the ratio
/// holds on any machine.
package enum ReceiptBenchmark {
    package struct Result: Codable, Sendable {
        package var benchmark = "receipts"
        package var secondsPerMeasurement: Double
        package var receiptBytes: Int
        package var inAppPurchases: Int
        /// Parsed (structure and fields), no verification.
        package var parsed: Double
        /// Parsed and verified, chain checks remembered (the first receipt of a chain checks it).
        package var verifiedWarmChain: Double
        /// Parsed and verified with a new verifier each time: every certificate signature checked.
        package var verifiedColdChain: Double
        /// One raw RSA verification (swift-certificates) of the receipt's signature over its payload.
        package var rawRSAVerify: Double
        /// verifiedWarmChain / rawRSAVerify.
        package var warmToRawRatio: Double
        package var signature: String
    }

    package static func run(receipt path: String, seconds: Double) async throws -> Result {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw VerifyBenchmark.BenchmarkError(message: "cannot read the receipt '\(path.prefix(256))'")
        }
        let input = [UInt8](data)
        let warm = ReceiptVerifier()
        let verified = try warm.verify(input)
        let parsed = try ReceiptParser.parse(input)
        guard let signer = parsed.certificates.first(where: { $0.serialNumber == parsed.signer.serialNumber }) else {
            throw VerifyBenchmark.BenchmarkError(message: "the receipt has no signer certificate")
        }
        let sha1 = parsed.signer.digestAlgorithm == [1, 3, 14, 3, 2, 26]
        let algorithm: Certificate.SignatureAlgorithm = sha1 ? .sha1WithRSAEncryption : .sha256WithRSAEncryption
        let raw = try await VerifyBenchmark.measure(seconds: seconds) {
            signer.publicKey.isValidSignature(parsed.signer.signature, for: parsed.content, signatureAlgorithm: algorithm)
        }
        let parseRate = try await VerifyBenchmark.measure(seconds: seconds) { (try? ReceiptParser.parse(input)) != nil }
        let warmRate = try await VerifyBenchmark.measure(seconds: seconds) { (try? warm.verify(input)) != nil }
        let coldRate = try await VerifyBenchmark.measure(seconds: seconds) { (try? ReceiptVerifier().verify(input)) != nil }
        return Result(
            secondsPerMeasurement: seconds, receiptBytes: try ReceiptParser.bytes(of: input).count,
            inAppPurchases: verified.receipt.inAppPurchases.count, parsed: parseRate, verifiedWarmChain: warmRate, verifiedColdChain: coldRate,
            rawRSAVerify: raw, warmToRawRatio: (warmRate / raw * 1_000).rounded() / 1_000,
            signature: "RSA with \(sha1 ? "SHA-1" : "SHA-256") (\(signer.publicKey)), signed by '\(signer.subject)'")
    }
}
