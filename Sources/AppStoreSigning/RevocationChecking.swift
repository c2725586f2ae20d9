public import X509

/// Online revocation checking of the leaf and intermediate certificates.
///
/// Off by default, like Apple's libraries. With OCSP on, the requester you supply fetches responses (Storekeeper's
/// signing library makes no network calls of its own); a chain that passed stays in the chain cache for the cache's
/// maximum age, so a revocation is noticed within that time.
public struct RevocationChecking: Sendable {
    enum Mode: Sendable {
        case disabled
        case ocsp(any OCSPRequester, OCSPFailureMode)
    }

    let mode: Mode

    /// No online checks.
    public static let disabled = RevocationChecking(mode: .disabled)

    /// OCSP for the leaf and intermediate, through `requester`. With `.hard`, an unreachable responder rejects the
    /// chain; with `.soft`, only a definite "revoked" answer does.
    public static func ocsp(requester: some OCSPRequester, failureMode: OCSPFailureMode = .hard) -> RevocationChecking {
        RevocationChecking(mode: .ocsp(requester, failureMode))
    }

    /// Whether OCSP checking is on.
    public var isEnabled: Bool {
        if case .disabled = mode { return false }
        return true
    }

    /// The OCSP policy, if enabled. Revocation is a question about now, so responses are judged at the current
    /// time whatever time the chain's validity is judged at.
    func ocspPolicy() -> OCSPVerifierPolicy<ErasedOCSPRequester>? {
        guard case .ocsp(let requester, let failureMode) = mode else { return nil }
        return OCSPVerifierPolicy(failureMode: failureMode, requester: ErasedOCSPRequester(base: requester))
    }
}

/// Lets a requester of any type sit in the verifier's concrete policy type.
struct ErasedOCSPRequester: OCSPRequester {
    let base: any OCSPRequester

    func query(request: [UInt8], uri: String) async -> OCSPRequesterQueryResult {
        await base.query(request: request, uri: uri)
    }
}
