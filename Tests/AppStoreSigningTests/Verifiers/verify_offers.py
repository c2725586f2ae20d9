"""Checks Storekeeper's offer signatures with independent libraries: Python `cryptography` for V1 (ECDSA P-256 /
SHA-256 over the exact U+2063-joined payload, DER signature) and PyJWT for the signed-request JWS.

Usage: verify_offers.py CASES.json PUBLIC_KEY.pem — each case is {"kind": "v1", "payload": [fields…], "signature":
base64} or {"kind": "jws", "jws": …, "audience": …, "claims": {…}[, "verifyIat": false]}. Prints one line per case; exits 1 on any failure.
"""
import base64, json, sys
import jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

cases = json.load(open(sys.argv[1]))
key = serialization.load_pem_public_key(open(sys.argv[2], "rb").read())
failed = False
for index, case in enumerate(cases):
    try:
        if case["kind"] == "v1":
            payload = "\u2063".join(case["payload"]).encode("utf-8")
            key.verify(base64.b64decode(case["signature"]), payload, ec.ECDSA(hashes.SHA256()))
            print(f"ok {index} v1: {len(payload)}-byte payload verified")
        else:
            header = jwt.get_unverified_header(case["jws"])
            assert header == {"alg": "ES256", "kid": case["kid"], "typ": "JWT"}, header
            claims = jwt.decode(
                case["jws"], key, algorithms=["ES256"], audience=case["audience"],
                options={"verify_iat": case.get("verifyIat", True)})
            assert "exp" not in claims, "no exp"
            for name, value in case["claims"].items():
                assert claims.get(name) == value, f"{name}: {claims.get(name)!r} != {value!r}"
            assert claims["nonce"] == claims["nonce"].lower(), "nonce lowercase"
            print(f"ok {index} jws {case['audience']}: claims {sorted(claims)}")
    except Exception as error:
        failed = True
        print(f"FAILED {index} {case['kind']}: {error!r}")
sys.exit(1 if failed else 0)
