import AppStoreModels
import Foundation
import StorekeeperTesting
import Synchronization
import Testing
import X509

@testable import AppStoreSigning

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let offset = Mutex(Duration.zero)
    private let start = ContinuousClock.now

    func advance(by duration: Duration) { offset.withLock { $0 += duration } }

    var now: @Sendable () -> ContinuousClock.Instant {
        { [self] in start + offset.withLock { $0 } }
    }
}

@Suite("Verifier: chain cache")
struct ChainCacheTests {
    typealias F = SigningFixtures

    @Test("a verified chain is reused: the second JWS with the same chain is a cache hit")
    func reuse() async throws {
        let verifier = F.verifier()
        let first = try await verifier.verifyTransaction(try F.signer.sign(F.transaction(id: "1")))
        let second = try await verifier.verifyTransaction(try F.signer.sign(F.transaction(id: "2")))
        #expect(!first.chainFromCache)
        #expect(second.chainFromCache)
        let statistics = verifier.chainCacheStatistics
        #expect(statistics.hits == 1)
        #expect(statistics.misses == 1)
        #expect(statistics.insertions == 1)
        #expect(statistics.count == 1)
    }

    @Test("a cache hit still checks the signature")
    func hitChecksSignature() async throws {
        let verifier = F.verifier()
        let jws = try F.signer.sign(F.transaction())
        _ = try await verifier.verifyTransaction(jws)
        var signature = try F.segmentBytes(2, of: jws)
        signature[0] ^= 0x80
        let forged = F.replacingSegment(2, of: jws, with: Base64URL.encode(signature))
        await #expect(throws: VerificationError.self) { try await verifier.verifyTransaction(forged) }
        #expect(verifier.chainCacheStatistics.hits == 1)
    }

    @Test("failures are never cached")
    func failuresNotCached() async throws {
        var options = TestCertificateAuthority.Options()
        options.intermediateHasAppleOID = false
        let authority = try TestCertificateAuthority.generate(options: options)
        let verifier = F.verifier(roots: [authority.rootCertificate])
        let jws = try authority.makeSigner().sign(F.transaction())
        for _ in 0..<3 {
            await #expect(throws: VerificationError.self) { try await verifier.verifyTransaction(jws) }
        }
        let statistics = verifier.chainCacheStatistics
        #expect(statistics.insertions == 0)
        #expect(statistics.hits == 0)
        #expect(statistics.count == 0)
    }

    @Test("a cached chain is not trusted for a time outside its certificates' validity")
    func cachedChainOutsideValidity() async throws {
        let start = F.signedDate.addingTimeInterval(-10 * 86_400)
        let signer = try F.authority.makeSigner(leaf: .init(validity: start...F.signedDate.addingTimeInterval(86_400)))
        let verifier = F.verifier()
        _ = try await verifier.verifyTransaction(try signer.sign(F.transaction()))
        var late = F.transaction()
        late.signedDate = F.signedDate.addingTimeInterval(2 * 86_400)
        let lateJWS = try signer.sign(late)
        let error = await #expect(throws: VerificationError.self) { try await verifier.verifyTransaction(lateJWS) }
        #expect(error?.code == .certificateExpired)
    }

    @Test("entries expire after the maximum age")
    func maximumAge() async throws {
        let clock = ManualClock()
        let verifier = F.verifier(cache: ChainCachePolicy(maximumEntries: 8, maximumAge: .seconds(60)), clock: clock.now)
        let jws = try F.signer.sign(F.transaction())
        _ = try await verifier.verifyTransaction(jws)
        clock.advance(by: .seconds(59))
        #expect(try await verifier.verifyTransaction(jws).chainFromCache)
        clock.advance(by: .seconds(2))
        #expect(try await verifier.verifyTransaction(jws).chainFromCache == false)
        let statistics = verifier.chainCacheStatistics
        #expect(statistics.evictions == 1)
        #expect(statistics.insertions == 2)
    }

    @Test("the cache holds at most its maximum number of chains, dropping the oldest")
    func maximumEntries() async throws {
        let clock = ManualClock()
        let verifier = F.verifier(cache: ChainCachePolicy(maximumEntries: 2, maximumAge: .seconds(600)), clock: clock.now)
        let signers = try (0..<3).map { _ in try F.authority.makeSigner() }
        for signer in signers {
            _ = try await verifier.verifyTransaction(try signer.sign(F.transaction()))
            clock.advance(by: .seconds(1))
        }
        #expect(verifier.chainCacheStatistics.count == 2)
        #expect(verifier.chainCacheStatistics.evictions == 1)
        // The first (oldest) chain was dropped; the last is still there.
        #expect(try await verifier.verifyTransaction(try signers[2].sign(F.transaction())).chainFromCache)
        #expect(try await verifier.verifyTransaction(try signers[0].sign(F.transaction())).chainFromCache == false)
    }

    @Test("with the cache disabled, every JWS gets full chain validation")
    func disabled() async throws {
        let verifier = F.verifier(cache: .disabled)
        let jws = try F.signer.sign(F.transaction())
        for _ in 0..<3 {
            #expect(try await verifier.verifyTransaction(jws).chainFromCache == false)
        }
        #expect(verifier.chainCacheStatistics.insertions == 0)
    }
}

/// An OCSP requester that answers from a script, never from the network.
final class ScriptedOCSPRequester: OCSPRequester {
    struct Unreachable: Error, CustomStringConvertible {
        var description: String { "responder unreachable (scripted)" }
    }

    let terminal: Bool
    let queries = Mutex<[String]>([])

    init(terminal: Bool) { self.terminal = terminal }

    var recordedQueries: [String] { queries.withLock { $0 } }

    func query(request: [UInt8], uri: String) async -> OCSPRequesterQueryResult {
        queries.withLock { $0.append(uri) }
        return terminal ? .terminalError(Unreachable()) : .nonTerminalError(Unreachable())
    }
}

@Suite("Verifier: revocation checking")
struct RevocationTests {
    typealias F = SigningFixtures

    @Test("OCSP in hard mode rejects a chain whose responder cannot answer; off, the chain verifies")
    func hardFailure() async throws {
        let signer = try F.authority.makeSigner(leaf: .init(ocspResponderURI: "http://127.0.0.1:9/ocsp"))
        let jws = try signer.sign(F.transaction())
        let requester = ScriptedOCSPRequester(terminal: true)
        let strict = F.verifier(configure: { $0.revocation = .ocsp(requester: requester, failureMode: .hard) })
        let error = await #expect(throws: VerificationError.self) { try await strict.verifyTransaction(jws) }
        #expect(error?.code == .certificateRevoked)
        #expect(error?.message.contains("unreachable") == true)
        let queries = requester.recordedQueries
        #expect(queries == ["http://127.0.0.1:9/ocsp"])
        _ = try await F.verifier().verifyTransaction(jws)
        #expect(RevocationChecking.disabled.isEnabled == false)
    }

    @Test("a non-terminal OCSP failure does not reject the chain")
    func softFailure() async throws {
        let signer = try F.authority.makeSigner(leaf: .init(ocspResponderURI: "http://127.0.0.1:9/ocsp"))
        let requester = ScriptedOCSPRequester(terminal: false)
        let verifier = F.verifier(configure: { $0.revocation = .ocsp(requester: requester, failureMode: .soft) })
        _ = try await verifier.verifyTransaction(try signer.sign(F.transaction()))
        let queries = requester.recordedQueries
        #expect(queries.count == 1)
    }
}
