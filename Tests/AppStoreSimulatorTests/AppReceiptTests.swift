import AppStoreModels
import AppStoreReceipts
import AppStoreSigning
import Foundation
import Testing

@testable import AppStoreSimulator

@Suite("Simulator: app receipts")
struct AppReceiptTests {
    /// A verifier that pins the test App Store's root, as a server configured for the simulator does.
    let verifier = ReceiptVerifier(roots: [TestAppStore.authority.rootCertificate])

    @Test("a customer's receipt verifies against the simulator's root and lists their transactions")
    func roundTrip() throws {
        var engine = try TestAppStore.engine()
        try engine.createCustomer(id: "ada")
        try engine.createCustomer(id: "bob")
        let subscription = try engine.purchase(.init(customerId: "ada", productId: "pro.monthly"))
        try engine.advance(by: 31 * 86_400)
        let lifetime = try engine.purchase(.init(customerId: "ada", productId: "unlock.lifetime"))
        _ = try engine.purchase(.init(customerId: "bob", productId: "pro.monthly"))

        let bytes = try engine.appReceipt(customerId: "ada", bundleId: nil)
        let verified = try verifier.verify(bytes)
        let receipt = verified.receipt
        #expect(verified.signedBy == "app-store")
        #expect(receipt.bundleId == TestAppStore.bundleID)
        #expect(receipt.receiptType == "ProductionSandbox")
        #expect(receipt.creationDate == engine.state.now)
        let ada = engine.transactions(customerId: "ada", bundleId: TestAppStore.bundleID).sorted { $0.info.purchaseDate < $1.info.purchaseDate }
        // A DER SET: the entries in the order of their encodings, as in the App Store's receipts.
        #expect(Set(receipt.inAppPurchases.map(\.transactionId)) == Set(ada.map(\.info.transactionId)))
        #expect(receipt.inAppPurchases.count == 3)  // the purchase, its renewal, the lifetime unlock
        for record in ada {
            let entry = try #require(receipt.inAppPurchases.first { $0.transactionId == record.info.transactionId })
            #expect(entry.originalTransactionId == record.info.originalTransactionId)
            #expect(entry.productId == record.info.productId)
            #expect(entry.purchaseDate == record.info.purchaseDate)
            #expect(entry.expiresDate == record.info.expiresDate)
            #expect(entry.quantity == 1)
        }
        #expect(receipt.inAppPurchases.contains { $0.transactionId == lifetime.transactionId && $0.expiresDate == nil })
        let history = try #require(receipt.transactionIdForHistory)
        #expect([subscription.originalTransactionId, lifetime.originalTransactionId].contains(history))
        // Base64, as an app sends it, verifies the same.
        #expect(try verifier.verify(Array(Data(bytes).base64EncodedString().utf8)).receipt == receipt)
    }

    @Test("a simulator's receipt is refused by Apple's root, and when changed or re-signed")
    func refusals() throws {
        var engine = try TestAppStore.engine()
        try engine.createCustomer(id: "ada")
        _ = try engine.purchase(.init(customerId: "ada", productId: "pro.monthly"))
        let bytes = try engine.appReceipt(customerId: "ada", bundleId: TestAppStore.bundleID)
        #expect(throws: ReceiptError.self) { try ReceiptVerifier().verify(bytes) }
        do {
            _ = try ReceiptVerifier().verify(bytes)
        } catch {
            #expect(error.code == .untrustedChain)
        }
        // One byte of the product ID changed.
        var changed = bytes
        let product = Array("pro.monthly".utf8)
        let at = try #require(changed.indices.first { changed[$0...].starts(with: product) })
        changed[at] = UInt8(ascii: "q")
        do {
            _ = try verifier.verify(changed)
            Issue.record("a changed receipt verified")
        } catch {
            #expect(error.code == .signatureInvalid)
        }
        // Signed by another leaf of another authority (same names): the chain does not reach the pinned root.
        var options = TestCertificateAuthority.Options()
        options.names = TestAppStore.authority.options.names
        options.validity = TestAppStore.authority.options.validity
        let other = try TestCertificateAuthority.generate(options: options)
        let (key, chain) = try other.issueLeaf()
        let forged = try ReceiptSigner(privateKey: key, certificateChain: chain).sign(try verifier.verify(bytes).receipt)
        do {
            _ = try verifier.verify(forged)
            Issue.record("a receipt of another authority verified")
        } catch {
            #expect(error.code == .untrustedChain)
        }
    }

    @Test("an unknown customer or app is a named error")
    func unknown() throws {
        let engine = try TestAppStore.engine()
        #expect(throws: SimulatorError.self) { try engine.appReceipt(customerId: "nobody", bundleId: nil) }
        var withCustomer = engine
        try withCustomer.createCustomer(id: "ada")
        do {
            _ = try withCustomer.appReceipt(customerId: "ada", bundleId: "com.example.other")
            Issue.record("an unknown app gave a receipt")
        } catch {
            #expect(error.code == .notFound)
            #expect(error.message.contains("com.example.other"))
        }
    }

    @Test("a transaction's legacy transaction receipt gives its transaction ID to the legacy parser")
    func legacy() throws {
        var engine = try TestAppStore.engine()
        try engine.createCustomer(id: "ada")
        let bought = try engine.purchase(.init(customerId: "ada", productId: "coins.100", quantity: 3))
        let receipt = try engine.legacyTransactionReceipt(transactionId: bought.transactionId)
        #expect(try LegacyTransactionReceipt.transactionId(Array(receipt.utf8)) == bought.transactionId)
        let text = String(decoding: Data(base64Encoded: receipt) ?? Data(), as: UTF8.self)
        #expect(text.contains(#""environment" = "Sandbox";"#) && text.contains(#""signature" = ""#))
        #expect(throws: SimulatorError.self) { try engine.legacyTransactionReceipt(transactionId: "999") }
    }

    @Test(
        "every one-bit change of a receipt is refused, but in the certificates it carries where the certificate still reads the same (the root is never trusted: it is pinned)"
    )
    func everyByte() throws {
        var engine = try TestAppStore.engine()
        try engine.createCustomer(id: "ada")
        _ = try engine.purchase(.init(customerId: "ada", productId: "pro.monthly"))
        let bytes = try engine.appReceipt(customerId: "ada", bundleId: nil)
        let original = try verifier.verify(bytes)
        let certificates = try TestAppStore.receiptSigner.certificateChain.map { certificate -> Range<Int> in
            let der = try ReceiptSigner.derBytes(of: certificate)
            let at = try #require(bytes.indices.first { bytes[$0...].starts(with: der) })
            return at..<(at + der.count)
        }
        var accepted: [Int] = []
        for index in bytes.indices {
            var changed = bytes
            changed[index] ^= 0x01
            guard let verified = try? verifier.verify(changed) else { continue }
            // Only an encoding swift-certificates tolerates in a certificate's unsigned part (its signature BIT
            // STRING's unused-bits count), or anything in the root, which is never read: the same receipt, signer
            // and chain.
            let inCertificate = certificates.contains { $0.contains(index) }
            if !inCertificate || verified.receipt != original.receipt || verified.signer != original.signer { accepted.append(index) }
        }
        #expect(accepted.isEmpty, "accepted with a bit changed at \(accepted.prefix(20)) of \(bytes.count)")
    }
}
