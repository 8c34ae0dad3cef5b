"""A small but real OpenID Connect provider for tests, on a loopback port in a thread.

It serves discovery, JWKS, authorize (consent is automatic: it signs in `provider.claims`), token (client
secret, redirect URI and PKCE checked) and userinfo, and signs ID tokens with RS256. `provider.mode`
makes it misbehave the ways a relying party must refuse: "bad_signature" (signed by a key it does not
publish, under the published kid), "wrong_audience", "expired", "wrong_nonce".
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

CLIENT_ID = "mooncake-test"
CLIENT_SECRET = "mooncake-test-secret"
KID = "test-key-1"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _int_b64(n: int) -> str:
    return b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def sign_rs256(claims: dict[str, Any], key: rsa.RSAPrivateKey, kid: str = KID) -> str:
    header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": kid}).encode())
    body = b64url(json.dumps(claims).encode())
    signature = key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{header}.{body}.{b64url(signature)}"


@dataclass
class Grant:
    claims: dict[str, Any]
    nonce: str
    redirect_uri: str
    code_challenge: str


@dataclass
class Provider:
    server: ThreadingHTTPServer
    key: rsa.RSAPrivateKey
    other_key: rsa.RSAPrivateKey
    claims: dict[str, Any] = field(default_factory=dict)
    mode: str = "ok"
    grants: dict[str, Grant] = field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_requests: int = 0

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def jwks(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": KID,
                    "n": _int_b64(numbers.n),
                    "e": _int_b64(numbers.e),
                }
            ]
        }

    def id_token(self, grant: Grant) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": grant.nonce,
            **grant.claims,
        }
        if self.mode == "wrong_audience":
            claims["aud"] = "some-other-app"
        elif self.mode == "expired":
            claims["iat"], claims["exp"] = now - 3600, now - 1800
        elif self.mode == "wrong_nonce":
            claims["nonce"] = "not-the-one-you-sent"
        key = self.other_key if self.mode == "bad_signature" else self.key
        return sign_rs256(claims, key)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                base = provider.url
                self._json(200, {
                    "issuer": base,
                    "authorization_endpoint": f"{base}/authorize",
                    "token_endpoint": f"{base}/token",
                    "jwks_uri": f"{base}/jwks",
                    "userinfo_endpoint": f"{base}/userinfo",
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256"],
                    "code_challenge_methods_supported": ["S256"],
                })  # fmt: skip
            elif url.path == "/jwks":
                self._json(200, provider.jwks())
            elif url.path == "/authorize":
                if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
                    self._json(400, {"error": "invalid_request"})
                    return
                code = secrets.token_urlsafe(16)
                provider.grants[code] = Grant(
                    claims=dict(provider.claims), nonce=query.get("nonce", ""),
                    redirect_uri=query["redirect_uri"], code_challenge=query.get("code_challenge", ""),
                )  # fmt: skip
                target = (
                    query["redirect_uri"] + "?" + urlencode({"code": code, "state": query.get("state", "")})
                )
                self.send_response(302)
                self.send_header("Location", target)
                self.end_headers()
            elif url.path == "/userinfo":
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                claims = provider.tokens.get(token)
                self._json(200, claims) if claims else self._json(401, {"error": "invalid_token"})
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if urlsplit(self.path).path != "/token":
                self._json(404, {"error": "not_found"})
                return
            provider.token_requests += 1
            grant = provider.grants.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            challenge = b64url(hashlib.sha256(verifier.encode()).digest())
            if (form.get("client_id"), form.get("client_secret")) != (CLIENT_ID, CLIENT_SECRET):
                self._json(401, {"error": "invalid_client"})
            elif (
                grant is None
                or grant.redirect_uri != form.get("redirect_uri")
                or challenge != grant.code_challenge
            ):
                self._json(400, {"error": "invalid_grant"})
            else:
                access = secrets.token_urlsafe(16)
                provider.tokens[access] = {"sub": grant.claims.get("sub"), **grant.claims}
                self._json(
                    200,
                    {"access_token": access, "token_type": "Bearer", "id_token": provider.id_token(grant)},
                )

    return Handler


def start_provider() -> Provider:
    keys = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2)]
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    provider = Provider(server=server, key=keys[0], other_key=keys[1])
    server.RequestHandlerClass = _handler(provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return provider
