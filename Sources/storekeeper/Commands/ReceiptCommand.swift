import AppStoreModels
import AppStoreReceipts
import AppStoreSigning
import ArgumentParser
import Foundation
import X509

struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt",
        abstract: "Verify a StoreKit 1 app receipt and print it, decoded, as JSON.",
        discussion: """
            Parses an app receipt (base64 or raw PKCS#7, DER or Xcode's BER), checks its signature over the \
            payload and its chain: a leaf with Apple's receipt-signing OID and an intermediate with Apple's WWDR OID, \
            signed by the pinned 2006 Apple Root CA (bundled; never the root the receipt carries), each valid at the \
            receipt's creation date by default; an Xcode receipt only against the certificate given with \
            --xcode-certificate. A legacy transaction receipt (purchase-info) prints its transaction ID, marked \
            unverified (it carries no signature to check). On failure prints `error: <code>: <message>` to standard \
            error and exits 1.
            """
    )

    @Option(name: .customLong("root"), help: "A trusted root certificate (DER or PEM). Repeatable. Default: the bundled 2006 Apple Root CA.")
    var roots: [String] = []

    @Option(name: .customLong("xcode-certificate"), help: "The StoreKit certificate exported from Xcode, to verify Xcode receipts.")
    var xcodeCertificate: String?

    @Option(help: "When to judge certificate validity: created (the receipt's creation date), now, or an ISO-8601 date.")
    var at: String = "created"

    @Argument(help: "The base64 receipt, @FILE (base64 or raw bytes), or - for standard input.")
    var input: String

    func run() async throws {
        try await reportingFailures {
            let bytes = try InputArgument.bytes(
                input, limit: ReceiptParser.maximumBytes * 4 / 3 + 4, tooLarge: ReceiptError.Code.tooLarge.rawValue)
            let verifier = ReceiptVerifier(
                roots: try roots.isEmpty ? [.appleIncRoot] : roots.map { try VerifyCommand.loadCertificate($0) },
                xcodeCertificate: try xcodeCertificate.map { try VerifyCommand.loadCertificate($0, role: "Xcode certificate") })
            let moment: ReceiptVerifier.Moment
            switch at.lowercased() {
            case "created", "creation": moment = .creation
            case "now": moment = .now
            default:
                guard let date = (try? Date(at, strategy: .iso8601)) ?? (try? Date(at + "T00:00:00Z", strategy: .iso8601)) else {
                    throw CLIError(
                        code: "invalid-option",
                        message:
                            "--at must be 'created', 'now' or an ISO-8601 date such as 2020-01-02T03:04:05Z, not \(UntrustedText.quoted(at, limit: 64))"
                    )
                }
                moment = .date(date)
            }
            let verified: ReceiptVerifier.Verified
            do throws(ReceiptError) {
                verified = try verifier.verify(bytes, at: moment)
            } catch {
                // A legacy transaction receipt is base64 of text, not PKCS#7.
                guard error.code == .notBase64 || error.code == .notPKCS7, let id = try? LegacyTransactionReceipt.transactionId(bytes) else {
                    throw CLIError(code: error.code.rawValue, message: error.message)
                }
                struct Legacy: Encodable {
                    var kind = "legacy-transaction-receipt"
                    var transactionId: String
                    var verified = false
                    var note = "a transaction receipt carries no signature: verify what Get Transaction History answers for this ID"
                }
                try JSONOutput.print(Legacy(transactionId: id))
                return
            }
            struct Report: Encodable {
                var kind = "app-receipt"
                var verified: ReceiptVerifier.Verified
                var transactionIdForHistory: String?
            }
            try JSONOutput.print(Report(verified: verified, transactionIdForHistory: verified.receipt.transactionIdForHistory))
        }
    }
}
