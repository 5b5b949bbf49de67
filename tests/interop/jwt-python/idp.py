"""An independent JWT issuer for walletgate's interop tests (PyJWT + cryptography).

Plays a Zitadel-shaped identity provider: RS256, ES256 and EdDSA keys, a JWKS
document on loopback, access tokens with `opensea_scopes` (string or array),
`linked_wallets` and an account-id `sub`. It also verifies a walletgate-minted
JWT against walletgate's own JWKS URL, so both directions are checked by a
library that is not walletgate's.

    python idp.py --issuer ISS --audience AUD --wallet 0x...

prints one line `{"port": N}` and serves on 127.0.0.1:N until killed:

    GET  /jwks            the public keys (each fetch is counted)
    GET  /fetches         {"count": <JWKS fetches so far>}
    GET  /token/<case>    a token for <case> (see CASES)
    POST /verify          {"jwks": url, "token": t, "issuer": i, "audience": a}
                          -> {"ok": true, "claims": {...}} or {"ok": false, "error": ...}

Every key here is generated at start and thrown away at exit.
"""

import argparse
import base64
import hashlib
import hmac
import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
# Signs the unknown-kid tokens; never published.
STRANGER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)

KIDS = {"RS256": "zitadel-rsa-1", "ES256": "zitadel-ec-1", "EdDSA": "zitadel-ed-1"}
PRIVATE = {"RS256": RSA_KEY, "ES256": EC_KEY, "EdDSA": ED_KEY}


def jwks_document():
    keys = []
    for alg, to_jwk, key in (
        ("RS256", RSAAlgorithm.to_jwk, RSA_KEY),
        ("ES256", ECAlgorithm.to_jwk, EC_KEY),
        ("EdDSA", OKPAlgorithm.to_jwk, ED_KEY),
    ):
        jwk = json.loads(to_jwk(key.public_key()))
        jwk.update({"kid": KIDS[alg], "alg": alg, "use": "sig"})
        keys.append(jwk)
    return {"keys": keys}


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(settings, **changes):
    now = int(time.time())
    body = {
        "iss": settings.issuer,
        "aud": [settings.audience, "zitadel-project-271828"],
        "sub": "314159265358979323",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "jti": secrets.token_hex(8),
        "linked_wallets": [settings.wallet],
        "opensea_scopes": "read:favorites read:wallets",
    }
    body.update(changes)
    return body


def signed(alg, body, kid=None, key=None):
    return jwt.encode(
        body,
        key or PRIVATE[alg],
        algorithm=alg,
        headers={"kid": kid or KIDS[alg], "typ": "JWT"},
    )


def unsigned(header, body):
    return b64(json.dumps(header).encode()) + "." + b64(json.dumps(body).encode())


def token_for(case, settings):
    if case == "rs256":
        return signed("RS256", claims(settings))
    if case == "es256_array":
        return signed("ES256", claims(settings, opensea_scopes=["read:favorites", "openid"]))
    if case == "eddsa":
        return signed("EdDSA", claims(settings))
    if case == "no_scope":
        return signed("RS256", claims(settings, opensea_scopes="read:wallets"))
    if case == "expired":
        past = int(time.time()) - 3600
        return signed("RS256", claims(settings, iat=past - 600, nbf=past - 600, exp=past))
    if case == "wrong_issuer":
        return signed("RS256", claims(settings, iss="https://evil.example"))
    if case == "wrong_audience":
        return signed("RS256", claims(settings, aud="https://another-api.example"))
    if case == "alg_none":
        header = {"alg": "none", "typ": "JWT", "kid": KIDS["RS256"]}
        return unsigned(header, claims(settings)) + "."
    if case == "hs256_confusion":
        # The classic: HMAC keyed with the RSA public key as published.
        secret = RSA_KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        header = {"alg": "HS256", "typ": "JWT", "kid": KIDS["RS256"]}
        signing_input = unsigned(header, claims(settings))
        mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + b64(mac)
    if case == "unknown_kid":
        kid = "forged-" + secrets.token_hex(6)
        return signed("RS256", claims(settings), kid=kid, key=STRANGER_KEY)
    raise KeyError(case)


def verify(request):
    client = jwt.PyJWKClient(request["jwks"])
    token = request["token"]
    header = jwt.get_unverified_header(token)
    key = client.get_signing_key_from_jwt(token)
    decoded = jwt.decode(
        token,
        key.key,
        algorithms=["EdDSA", "ES256", "RS256"],
        audience=request["audience"],
        issuer=request["issuer"],
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )
    if header.get("typ") != "at+jwt":
        raise ValueError("typ is not at+jwt")
    return decoded


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--audience", required=True)
    parser.add_argument("--wallet", required=True)
    settings = parser.parse_args()
    fetches = {"count": 0}
    lock = threading.Lock()
    document = json.dumps(jwks_document()).encode()

    class Handler(BaseHTTPRequestHandler):
        def answer(self, status, body):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/jwks":
                with lock:
                    fetches["count"] += 1
                return self.answer(200, document)
            if self.path == "/fetches":
                with lock:
                    return self.answer(200, dict(fetches))
            if self.path.startswith("/token/"):
                try:
                    return self.answer(200, {"token": token_for(self.path[7:], settings)})
                except KeyError:
                    return self.answer(404, {"error": "unknown case"})
            self.answer(404, {"error": "not found"})

        def do_POST(self):
            if self.path != "/verify":
                return self.answer(404, {"error": "not found"})
            length = int(self.headers.get("content-length", "0"))
            request = json.loads(self.rfile.read(length))
            try:
                self.answer(200, {"ok": True, "claims": verify(request)})
            except Exception as error:  # the test reads the reason
                self.answer(200, {"ok": False, "error": f"{type(error).__name__}: {error}"})

        def log_message(self, *args):
            pass  # requests carry tokens: never logged

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
