public import SwiftASN1

extension ASN1ObjectIdentifier {
    /// Object identifiers Apple puts in the certificates that sign App Store data.
    public enum AppleCertificateExtension {
        /// On the leaf: App Store receipt signing (1.2.840.113635.100.6.11.1).
        public static let receiptSigning: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
        /// On the intermediate: Apple Worldwide Developer Relations CA (1.2.840.113635.100.6.2.1).
        public static let worldwideDeveloperRelations: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    }
}
