/// The protected header of an App Store JWS: `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
public struct JWSHeader: Codable, Hashable, Sendable {
    /// The signature algorithm; App Store data uses `ES256` only.
    public var alg: String
    /// DER certificates in standard base64, leaf first.
    public var x5c: [String]?
    /// Key ID: not in App Store signed data since 2022, used by API-auth JWTs.
    public var kid: String?
    /// `JWT` in API-auth tokens.
    public var typ: String?

    public init(alg: String, x5c: [String]? = nil, kid: String? = nil, typ: String? = nil) {
        self.alg = alg
        self.x5c = x5c
        self.kid = kid
        self.typ = typ
    }
}
