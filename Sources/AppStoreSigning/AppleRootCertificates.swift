import SwiftASN1
public import X509

extension Certificate {
    /// Apple Root CA - G3, the root every App Store signed payload chains to, bundled with Storekeeper
    /// (SHA-256 63:34:3A:BF:…:65:3E:91:79, valid 2014-04-30 to 2039-04-30).
    public static let appleRootCAG3: Certificate = {
        do {
            return try Certificate(derEncoded: PackageResources.AppleRootCA_G3_cer)
        } catch {
            fatalError("the bundled Apple Root CA - G3 does not parse: \(error)")
        }
    }()

    /// The DER bytes of the bundled Apple Root CA - G3.
    public static var appleRootCAG3DER: [UInt8] { PackageResources.AppleRootCA_G3_cer }
}
